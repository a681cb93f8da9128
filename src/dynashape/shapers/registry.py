"""Name -> shaper class. One registry, one signature: no caller special-cases a name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dynashape.shapers.base import Shaper, ShaperNeeds, Strength, Trajectory

__all__ = [
    "available_shapers",
    "config_class",
    "display_name",
    "get_shaper",
    "reference_shaper",
    "register_shaper",
    "shaper_class",
    "shaper_needs",
    "shaper_strength",
    "shaper_trajectory",
]

_REGISTRY: dict[str, type[Shaper]] = {}
S = TypeVar("S", bound=type[Shaper])


def register_shaper(name: str) -> Callable[[S], S]:
    """Class decorator registering a Shaper subclass under `name`; a taken name raises ValueError."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"shaper name must be a non-empty str, got {name!r}")

    def decorate(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, Shaper)):
            raise TypeError(f"register_shaper({name!r}) decorates Shaper subclasses, got {cls!r}")
        if not isinstance(cls.needs, ShaperNeeds):
            raise TypeError(f"{cls.__qualname__}.needs must be a ShaperNeeds, got {cls.needs!r}")
        _check_declarations(name, cls)
        taken = _REGISTRY.get(name)
        if taken is not None and taken is not cls:
            raise ValueError(f"shaper name {name!r} is already registered to {taken.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _check_declarations(name: str, cls: type[Shaper]) -> None:
    """Refuse a display name that is not text, a trajectory outside the shaper's metric namespace (``<name>/``,
    where its metrics are logged) and a second reference method, each error naming the shaper and the value."""
    if not isinstance(cls.display_name, str):
        raise TypeError(f"shaper {name!r}: display_name must be text, got {cls.display_name!r}")
    trajectory = cls.trajectory
    if trajectory is not None:
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"shaper {name!r}: trajectory must be a Trajectory, got {trajectory!r}")
        outside = [k for k in trajectory.keys if not k.startswith(f"{name}/")]
        if outside:
            raise ValueError(f"shaper {name!r}: trajectory key {outside[0]!r} is not in its namespace {name + '/'!r}")
    if cls.strength is not None and not isinstance(cls.strength, Strength):
        raise TypeError(f"shaper {name!r}: strength must be a Strength, got {cls.strength!r}")
    if not isinstance(cls.reference, bool):
        raise TypeError(f"shaper {name!r}: reference must be true or false, got {cls.reference!r}")
    other = [n for n, c in _REGISTRY.items() if c.reference and n != name]
    if cls.reference and other:
        raise ValueError(f"shaper {name!r} cannot be the reference method: {other[0]!r} already is")


def _lookup(name: str) -> type[Shaper]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown shaper {name!r}; available: {', '.join(available_shapers())}") from None


def get_shaper(name: str, **params: Any) -> Shaper:
    """Build the shaper `name` from keyword parameters (unknown names raise TypeError, bad values ValueError).

    Two keywords every shaper built from parts takes beside its config: ``overlong={"max_length": L,
    "buffer": 4096, "factor": 1.0}`` (DAPO's soft overlong punishment) and ``stop_properly=0.1`` (the reward of a
    truncated response times 0.1, ProRL's); both act on the method's reward channel (docs/field-methods.md).
    """
    cls = _lookup(name)
    config, penalties = _settings(name, params)
    return cls(config, penalties=penalties) if penalties else cls(config)


def check_shaper_params(name: str, **params: Any) -> None:
    """Refuse what ``get_shaper(name, **params)`` would refuse, without building the shaper (a trainer config
    checks its shaper's parameters when it is made)."""
    _settings(name, params)


def _settings(name: str, params: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """(the config, the penalty parts) of ``get_shaper(name, **params)``."""
    from dynashape.shapers.composed import ComposedShaper
    from dynashape.shapers.parts.penalties import PENALTY_KEYS, penalty_parts

    cls = _lookup(name)
    params = dict(params)
    given = {key: params.pop(key) for key in PENALTY_KEYS if key in params}
    config = cls.config_cls(**params)
    if not given:
        return config, ()
    if not issubclass(cls, ComposedShaper):
        raise ValueError(f"shaper {name!r} is not built from parts: it takes no {', '.join(sorted(given))}")
    parts = tuple(penalty_parts(**given))
    cls.check_penalties(parts)
    return config, parts


def shaper_class(name: str) -> type[Shaper]:
    """The registered class of shaper `name` (a recipe's is the `ComposedShaper` subclass it made)."""
    return _lookup(name)


def config_class(name: str) -> type:
    """The frozen config dataclass of shaper `name` (to validate engine config keys before building)."""
    return _lookup(name).config_cls


def shaper_needs(name: str) -> ShaperNeeds:
    """What shaper `name` reads from a batch beyond verdicts and lengths (fingerprints, prompt keys, rewards)."""
    return _lookup(name).needs


def available_shapers() -> list[str]:
    return sorted(_REGISTRY)


def display_name(name: str) -> str:
    """How a page names shaper ``name`` (its declared ``display_name``, else the registry name)."""
    return _lookup(name).display_name or name


def shaper_trajectory(name: str) -> Trajectory | None:
    """The controller state shaper ``name`` logs every step (``Shaper.trajectory``); None: it has no controller."""
    return _lookup(name).trajectory


def shaper_strength(name: str) -> Strength | None:
    """The main knob of shaper ``name`` (``Shaper.strength``); None: it has none to sweep."""
    return _lookup(name).strength


def reference_shaper() -> str:
    """The registry name of the reference method (``Shaper.reference``): a study's control where it names none."""
    found = [n for n, c in _REGISTRY.items() if c.reference]
    if not found:
        raise ValueError("no registered shaper is the reference method (Shaper.reference)")
    return found[0]
