"""absl flags generated from a config dataclass: the dataclass is the one source of defaults.

Every field of the config becomes a flag of the same name with the field's default and the help
text of its line in the class docstring's `Attributes:` section. Flagfiles (`--flagfile=...`)
override defaults and the command line overrides flagfiles; absl rejects unknown flags, and the
dataclass's `__post_init__` rejects invalid values, both before anything starts.
"""

import dataclasses
import re
import typing
from typing import Any, TypeVar

from absl import flags

Config = TypeVar("Config")


def _field_help(cls: type) -> dict[str, str]:
    """The `name: text` lines of the Attributes sections of the class and its bases."""
    helps = {}
    for klass in reversed(cls.__mro__):  # a subclass's text wins
        helps.update(_attributes(klass.__doc__ or ""))
    return helps


def _attributes(doc: str) -> dict[str, str]:
    """Parses a Google-style `Attributes:` section: `name: text`, continued on deeper lines."""
    helps, current, indent = {}, None, None
    lines = doc.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Attributes:"]
    for line in lines[starts[0] + 1:] if starts else []:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        match = re.match(r"^(\w+): (.*)$", line.strip())
        if depth == indent and match:
            current = match.group(1)
            helps[current] = match.group(2)
        elif depth > indent and current:
            helps[current] += " " + line.strip()
        else:
            break
    return helps


def define_flags(cls: type, flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per field of the dataclass `cls`."""
    helps = _field_help(cls)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind, default = hints[field.name], field.default
        help_text = helps.get(field.name, field.name)
        if kind is bool:
            flags.DEFINE_bool(field.name, default, help_text, flag_values=flag_values)
        elif kind is int:
            flags.DEFINE_integer(field.name, default, help_text, flag_values=flag_values)
        elif kind is float:
            flags.DEFINE_float(field.name, default, help_text, flag_values=flag_values)
        elif kind is str:
            flags.DEFINE_string(field.name, default, help_text, flag_values=flag_values)
        elif typing.get_origin(kind) is tuple:
            flags.DEFINE_list(field.name, [str(x) for x in default], help_text,
                              flag_values=flag_values)
        else:
            raise TypeError(f"{cls.__name__}.{field.name}: no flag type for {kind}")


def config_from_flags(cls: type[Config], flag_values: flags.FlagValues = flags.FLAGS,
                      **overrides: Any) -> Config:
    """Builds `cls` from parsed flags (then `overrides`); invalid values raise ValueError."""
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        value = flag_values[field.name].value
        if typing.get_origin(hints[field.name]) is tuple:
            (item_type, *_) = typing.get_args(hints[field.name])
            try:
                value = tuple(item_type(x) for x in value)
            except ValueError as e:
                raise ValueError(f"--{field.name}: {e}") from None
        values[field.name] = value
    values.update(overrides)
    return cls(**values)


def config_from_flagfile(cls: type[Config], path: str, **overrides: Any) -> Config:
    """`cls` from a flagfile, parsed as the launchers parse it (for tests, notebooks, scripts)."""
    flag_values = flags.FlagValues()
    define_flags(cls, flag_values)
    flag_values(["config", f"--flagfile={path}"])
    return config_from_flags(cls, flag_values, **overrides)
