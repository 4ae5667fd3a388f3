"""Security: users and their password hashes, roles, per-address permissions, the checks the
STOMP session and the HTTP API make, and TLS contexts (docs/security.md).

Nothing here knows STOMP or aiohttp: the server's session and the HTTP middleware call
`Access` (one per broker) and `SessionAccess` (one per connection)."""
