"""A method as one recipe: a function whose keyword arguments are its config and which returns a chain of parts.

After optax's ``alias.py`` (``adamw = chain(scale_by_adam(...), add_decayed_weights(...), scale_by_lr(...))``):

    @recipe("lead_saw")
    def lead_saw(*, l_min: float = 1000.0, b_max: float = 4000.0, whiten: str = "sequence") -> Chain:
        \"\"\"LEAD's reward channels with SAW's CV weights instead of PSI.\"\"\"
        return Chain(Correctness(), LeadEfficiency(l_min, b_max), CVWeights(), DecoupledNormalise(),
                     BatchWhiten(whiten))

    get_shaper("lead_saw", l_min=500.0)   # a registered shaper: the trainer, verl and TRL reach it by name

The keyword arguments become the shaper's frozen config dataclass (``config_class("lead_saw")``): each one
typed and defaulted, a value of the wrong type refused with its name, an unknown keyword refused (nothing is
accepted and ignored). A method whose parameters need more checks than their types passes its own config
dataclass (``config=``); its fields must then be exactly the function's keywords, and the config holds the
defaults (a keyword may leave its default out, and one it gives must equal the config's), so a default is written
once. The decorated function then validates its keywords through the config before building the chain. The
shaper is a ``ComposedShaper``: its state is the chain's, so checkpoints work as for every composed shaper.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from dynashape.shapers.base import ShaperNeeds, Strength, Trajectory
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts.flow import Chain
from dynashape.shapers.parts.penalties import PENALTY_KEYS
from dynashape.shapers.registry import register_shaper

__all__ = ["recipe"]

F = TypeVar("F", bound=Callable[..., Chain])


def _keywords(fn: Callable[..., Chain], name: str, *, defaults: bool = True) -> list[inspect.Parameter]:
    """The recipe's keyword-only parameters; anything else (a positional one, or with ``defaults`` a default-less
    one) is refused."""
    params = list(inspect.signature(fn).parameters.values())
    for p in params:
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"recipe {name!r}: parameter {p.name!r} must be keyword-only (after a bare *)")
        if defaults and p.default is inspect.Parameter.empty:
            raise TypeError(f"recipe {name!r}: parameter {p.name!r} needs a default (a method runs by its name alone)")
    return params


def _check_value(recipe_name: str, field: str, value: Any, kind: Any) -> None:
    """Refuse ``value`` unless it is of the annotated ``kind`` (float, int, bool, str, a Literal, or a tuple of
    those); an int is a float, a bool is neither."""
    where = f"{recipe_name}: {field}"
    if typing.get_origin(kind) is Literal:
        if value not in typing.get_args(kind):
            raise ValueError(f"{where} must be one of {typing.get_args(kind)}, got {value!r}")
        return
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, tuple):
            raise TypeError(f"{where} must be a tuple, got {type(value).__name__} {value!r}")
        (item, *_rest) = typing.get_args(kind) or (Any,)
        for v in value:
            _check_value(recipe_name, field, v, item)
        return
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{where} must be a number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{where} must be finite, got {value!r}")
    elif kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{where} must be an int, got {type(value).__name__} {value!r}")
    elif kind in (bool, str) and not isinstance(value, kind):
        raise TypeError(f"{where} must be a {kind.__name__}, got {type(value).__name__} {value!r}")


def _config_from_signature(fn: Callable[..., Chain], name: str) -> type:
    """A frozen keyword-only dataclass with one field per keyword of ``fn``, its values type-checked."""
    hints = typing.get_type_hints(fn)
    params = _keywords(fn, name)
    missing = [p.name for p in params if p.name not in hints]
    if missing:
        raise TypeError(
            f"recipe {name!r}: annotate {', '.join(missing)} (the annotation is what a value is checked against)"
        )
    fields = [(p.name, hints[p.name], dataclasses.field(default=p.default)) for p in params]

    def __post_init__(self: Any) -> None:
        for p in params:
            _check_value(name, p.name, getattr(self, p.name), hints[p.name])

    title = "".join(part.capitalize() for part in name.split("_"))
    config = dataclasses.make_dataclass(
        f"{title}Config", fields, frozen=True, kw_only=True, namespace={"__post_init__": __post_init__}
    )
    config.__module__ = fn.__module__
    config.__doc__ = f"The parameters of recipe {name!r} (its keyword arguments)."
    return config


def _config_matching(fn: Callable[..., Chain], name: str, config: type) -> type:
    """``config`` when its fields are exactly ``fn``'s keywords (so none is accepted and ignored) and every default
    ``fn`` writes is the config's (so the two cannot drift apart)."""
    params = _keywords(fn, name, defaults=False)
    fields = {f.name: f for f in dataclasses.fields(config)}
    if {p.name for p in params} != set(fields):
        raise TypeError(
            f"recipe {name!r}: {config.__name__}'s fields {sorted(fields)} differ from the function's keywords "
            f"{sorted(p.name for p in params)}"
        )
    defaults = config()
    for p in params:
        if p.default is not inspect.Parameter.empty and p.default != getattr(defaults, p.name):
            raise TypeError(
                f"recipe {name!r}: {p.name}={p.default!r} differs from {config.__name__}'s default "
                f"{getattr(defaults, p.name)!r} (leave the default out: the config holds it)"
            )
    return config


def _validating(fn: F, config: type) -> F:
    """``fn`` called through ``config``: its keywords validated and defaulted by the config class, so calling the
    recipe directly refuses what ``get_shaper`` refuses. Its signature shows the config's defaults."""
    defaults = config()

    @functools.wraps(fn)
    def build(**kw: Any) -> Chain:
        cfg = config(**kw)
        return fn(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})

    params = [p.replace(default=getattr(defaults, p.name)) for p in inspect.signature(fn).parameters.values()]
    build.__signature__ = inspect.signature(fn).replace(parameters=params)  # type: ignore[attr-defined]
    return build  # type: ignore[return-value]


def recipe(
    name: str,
    *,
    needs: ShaperNeeds | None = None,
    config: type | None = None,
    own_penalties: tuple[str, ...] = (),
    display: str = "",
    trajectory: Trajectory | None = None,
    strength: Strength | None = None,
    reference: bool = False,
) -> Callable[[F], F]:
    """Register the decorated function as the shaper ``name``: ``get_shaper(name, **kw)`` builds the chain
    ``fn(**kw)`` inside a ``ComposedShaper``. ``needs`` declares what it reads beyond verdicts and lengths
    (``ShaperNeeds``); ``config`` is an existing config dataclass to validate with (default: one made from the
    function's annotated keyword arguments); ``own_penalties`` names the engines' penalties (``PENALTY_KEYS``) the
    method applies itself from its config, which ``get_shaper`` then refuses rather than apply twice. ``display``
    is how a page names the method (default: ``name``), ``trajectory`` the controller state it logs every step
    (``Trajectory``), ``strength`` its main knob, for a frontier study to sweep (``Strength``), ``reference``
    whether it is the method a study compares with when it names no control (``Shaper.reference``). Returns the
    function (through ``config`` when given), so it still builds a bare chain."""

    def decorate(fn: F) -> F:
        cfg = _config_from_signature(fn, name) if config is None else _config_matching(fn, name, config)
        keys = [f.name for f in dataclasses.fields(cfg)]

        def chain(self: ComposedShaper) -> Chain:
            built = fn(**{k: getattr(self.config, k) for k in keys})
            if not isinstance(built, Chain):
                raise TypeError(f"recipe {name!r} must return a Chain, got {type(built).__name__}")
            return built

        title = "".join(part.capitalize() for part in name.split("_"))
        shaper = type(
            f"{title}Shaper",
            (ComposedShaper,),
            {
                "config_cls": cfg,
                "needs": needs if needs is not None else ShaperNeeds(),
                "chain": chain,
                "own_penalties": tuple(own_penalties),
                "display_name": display,
                "trajectory": trajectory,
                "strength": strength,
                "reference": reference,
                "recipe": staticmethod(fn if config is None else _validating(fn, config)),
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
            },
        )
        register_shaper(name)(shaper)
        return shaper.recipe

    for key in own_penalties:
        if key not in PENALTY_KEYS:
            raise ValueError(f"recipe {name!r}: own_penalties names {key!r}, not one of {PENALTY_KEYS}")

    return decorate
