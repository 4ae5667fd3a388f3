"""JMS message selectors (Jakarta Messaging 3.x §3.8.1): parse, compile, evaluate, prune.

`lexer` -> `parser` (syntax tree with static kinds, `ast`) -> `compiler` (generated Python,
semantics in `runtime`) -> `api.Selector`. `summary` and `prune` let the paging store skip
page files a selector cannot match; `properties` shows a broker message to a selector.
Pure: no I/O, no asyncio, nothing from the rest of the broker but the Message type.
"""

from pagemq.core.errors import InvalidSelector
from pagemq.core.selector.api import Selector, compile
from pagemq.core.selector.errors import SelectorError

__all__ = ["Selector", "SelectorError", "compile", "compile_filter"]


def compile_filter(text: str | None) -> Selector | None:
    """A consumer's selector or a queue's filter; none for blank text. A bad one is the
    client's error (`InvalidSelector`, an ERROR frame), not the broker's."""
    if text is None or not text.strip():
        return None
    try:
        return compile(text)
    except SelectorError as exc:
        raise InvalidSelector(f"invalid selector {text!r}: {exc}") from exc
