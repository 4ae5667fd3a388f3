"""Public selector API: `compile(text) -> Selector`, `Selector.matches(properties)`,
`SelectorError`. The implementation lives in `pagemq.core.selector`; see docs/selectors.md."""

from pagemq.core.selector import Selector, SelectorError, compile

__all__ = ["Selector", "SelectorError", "compile"]
