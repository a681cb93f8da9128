"""``--set KEY=VALUE`` on the command line into a run's config: each value typed by the field it goes to
(``SetText``), never by YAML, and sorted by section (``parse_overrides``).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dynashape.train.config import SECTIONS, train_sections

__all__ = ["SetText", "parse_overrides"]

_TRUE, _FALSE, _NONE = ("true", "yes", "on"), ("false", "no", "off"), ("null", "none", "~")


class SetText(str):
    """A ``--set`` value exactly as it was written on the command line; ``_coerce`` reads it as its field's type.

    The quoting rule (``--help`` says it): text in matching quotes, ``"..."`` or ``'...'``, is that text, always
    a string; otherwise a string field takes the text as written (``prompt.suffix=0x10`` is ``"0x10"``), a
    number field parses it (``lr=5e-4``), a bool field takes true/false/yes/no/on/off, an optional field
    takes null/none for None, a tuple field a comma-separated list, and a field of any type (``shaper_kwargs.*``)
    a JSON value (``0.5``, ``true``, ``[0.5, 0.5]``, ``{"alpha": 0.1}``), a float (``nan``), else the text.
    """


def _quoted(text: str) -> str | None:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else None


def _first_fit(name: str, hint: Any, options: Sequence[Any], convert: Callable[[Any], Any], shown: Any) -> Any:
    """The value as the first of a union's ``options`` that takes it, or one ValueError saying why none did."""
    errors = []
    for option in options:
        try:
            return convert(option)
        except ValueError as err:
            errors.append(str(err))
    raise ValueError(errors[0] if len(errors) == 1 else f"{name}: {shown!r} fits none of {hint}")


def _from_text(name: str, hint: Any, text: SetText) -> Any:
    """A command-line value as field type ``hint`` (see ``SetText``), or a ValueError naming ``name``."""
    quoted = _quoted(text.strip())
    raw = text.strip()
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        if quoted is None and raw.lower() in _NONE and len(options) < len(typing.get_args(hint)):
            return None
        return _first_fit(name, hint, options, lambda option: _from_text(name, option, text), raw)
    if hint is str:
        return quoted if quoted is not None else str.__str__(text)
    if quoted is not None and hint is not Any:
        raise ValueError(f"{name} must be {getattr(hint, '__name__', hint)}, got the quoted text {raw!r}")
    try:
        if hint is bool:
            if raw.lower() in _TRUE or raw.lower() in _FALSE:
                return raw.lower() in _TRUE
        elif hint is int:
            number = float(raw) if any(c in raw for c in ".eE") else int(raw, 10)
            if isinstance(number, int) or number.is_integer():
                return int(number)
        elif hint is float:
            return float(raw)
        elif origin is tuple or hint is tuple:
            return tuple(v.strip() for v in raw.split(",") if v.strip())
        elif hint is Any or origin is dict or hint is dict:
            if quoted is not None:
                return quoted
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                try:
                    return float(raw)  # nan, inf
                except ValueError:
                    return str.__str__(text)
            if (origin is dict or hint is dict) and not isinstance(value, dict):
                raise ValueError
            return value
        else:
            return str.__str__(text)
    except ValueError:
        pass
    kind = getattr(hint, "__name__", str(hint))
    raise ValueError(f"{name} must be {kind}, got {raw!r}")


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """``value`` as the field type ``hint`` wants, or a ValueError naming ``name``: command-line text is read
    by ``_from_text``; of Python or YAML values, an int is taken for a float and a number for a string, a bool
    never for a number, nor a fraction for an int."""
    if isinstance(value, SetText):
        return _from_text(name, hint, value)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        rest = [o for o in options if o is not type(None)]
        return _first_fit(name, hint, rest, lambda option: _coerce(name, option, value), value)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # YAML read "7" as a number; the field wants the text
    elif origin is tuple or hint is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(value)
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
    elif origin is dict or hint is dict:
        if isinstance(value, dict):
            return value
    else:
        return value
    kind = getattr(hint, "__name__", str(hint))
    raise ValueError(f"{name} must be {kind}, got {value!r}")


def parse_overrides(items: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Sort ``section.key -> value`` overrides into ``{section: {key: value}}``, typed as the fields are.

    A key without a section belongs to ``train`` (``steps``, ``lr``), and so do train's own sections, with or
    without the ``train.`` prefix: ``drpo.tau=5`` (or ``train.drpo.tau=5``) gives ``{"train": {"drpo": {"tau":
    5.0}}}``, merged into the preset's section by ``make_train_config``. ``shaper_kwargs.NAME`` (or
    ``train.shaper_kwargs.NAME``) goes into train's ``shaper_kwargs`` dict, checked by the shaper itself.

    Raises:
        ValueError: an unknown section or key (the message lists the allowed ones), or a value of the wrong
            type (the message names the key).
    """
    nested = train_sections()
    out: dict[str, dict[str, Any]] = {}
    for raw_key, value in items.items():
        key = raw_key.strip()
        section, _, name = key.partition(".")
        if not name or section in ("shaper_kwargs", *nested):
            section, name = "train", key
        if section not in SECTIONS:
            raise ValueError(f"--set {key}: unknown section {section!r}; sections: {', '.join(SECTIONS)}")
        head, _, leaf = name.partition(".")
        if section == "train" and head == "shaper_kwargs" and leaf:
            typed = _coerce(f"--set {key}", Any, value)  # the shaper's own config types it further
            out.setdefault("train", {}).setdefault("shaper_kwargs", {})[leaf] = typed
            continue
        path: tuple[str, ...] = (section,)
        if section == "train" and head in nested and leaf:
            path, name = ("train", head), leaf
        klass = nested[head] if len(path) == 2 else SECTIONS[section]
        hints = typing.get_type_hints(klass)
        allowed = [f.name for f in dataclasses.fields(klass)]
        if name not in allowed:
            raise ValueError(f"--set {key}: {'.'.join(path)} has no key {name!r}; its keys: {', '.join(allowed)}")
        if dataclasses.is_dataclass(hints[name]):
            keys = ", ".join(f.name for f in dataclasses.fields(hints[name]))
            raise ValueError(f"--set {key}: {name} is a section; set its keys as {name}.KEY=VALUE ({keys})")
        target: dict[str, Any] = out.setdefault(path[0], {})
        for part in path[1:]:
            target = target.setdefault(part, {})
        target[name] = _coerce(f"--set {key}", hints[name], value)
    return out
