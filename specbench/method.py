"""The method contract, in one place: what a method declares (`MethodInfo` with its `Option`s), what its builder gets
(`BuildContext`), and what it builds (a `Drafter` proposing `Draft`s; specbench.decode.draft). A method imports this
module and the decode core, nothing from run/ or analysis/.

A method's declaration (its MethodInfo, Options and tuning) imports nothing heavy: `build` and a trainer may be a
`Ref` ("module:function", imported at its first call), so the registry lists every method without importing torch
or the methods' code (`list`, argument errors and bad paths answer at once). This module imports no torch either;
the drafter contract's types are re-exported from specbench.decode.draft on first use.

Options are declared, never guessed: `@key=value` and `--opt key=value` are checked against a method's declarations
before any model loads (an unknown key or a bad value is one line naming the method, the key, the valid keys and
the closest match), and a builder reads only declared options, typed, with their defaults filled in.
"""
from __future__ import annotations

import difflib
import importlib
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from specbench.decode.cost_model import CostModel
from specbench.decode.model_files import local_folder
from specbench.errors import SpecbenchError

if TYPE_CHECKING:
    from pathlib import Path

    from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
    from specbench.decode.target import LoadedModel

__all__ = ["BuildContext", "DecodeContext", "Draft", "Drafter", "MethodInfo", "OBJECTIVE_KEY", "Option", "Ref",
           "StepResult", "TUNING_BUDGET", "closest", "join_options", "key_values", "parse_options"]
CONTRACT = ("DecodeContext", "Draft", "Drafter", "StepResult")  # re-exported from specbench.decode.draft


def __getattr__(name: str) -> Any:
    """The drafter contract's types (`from specbench.method import Drafter`), imported with torch on first use."""
    if name in CONTRACT:
        return getattr(importlib.import_module("specbench.decode.draft"), name)
    raise AttributeError(f"module 'specbench.method' has no attribute {name!r}")

# How many settings `tune` may try per method: the same grid budget for every method.
TUNING_BUDGET = 4

TYPES = {int: "int", float: "float", str: "str"}

# The config.json key where a trained drafter records what it was trained with ({"name": ..., settings}; e.g.
# `train eagle --objective hass`); the budget table of every report shows it.
OBJECTIVE_KEY = "specbench_objective"


@dataclass(frozen=True)
class Option:
    """One option a method accepts. `default` None means "not set" (the method decides, e.g. the shipped head).
    For str options `choices` lists the allowed values (empty: any string); for numbers it lists words allowed
    beside a number (e.g. "auto"). `low`/`high` bound a number (inclusive)."""

    name: str
    default: int | float | str | None
    help: str
    type: type = str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise TypeError(f"option {self.name}: type must be int, float or str, not {self.type}")

    def parse(self, raw: Any, method: str) -> int | float | str | None:
        """The value of `raw` (a string from the command line, or a typed value from the API), checked."""
        if raw is None:
            return None
        text = str(raw)
        if self.type is str or text in self.choices:
            if self.choices and text not in self.choices:
                raise SpecbenchError(f"option {self.name}={text} for {method}: expected one of "
                                     f"{', '.join(self.choices)}")
            return text
        try:
            value = self.type(text)
        except ValueError:
            raise SpecbenchError(f"option {self.name}={text} for {method}: expected {self.range()}") from None
        out_of_range = (self.low is not None and value < self.low) or (self.high is not None and value > self.high)
        if out_of_range or not math.isfinite(value):
            raise SpecbenchError(f"option {self.name}={text} for {method}: expected {self.range()}")
        return value

    def range(self) -> str:
        bounds = [f">= {self.low:g}" if self.low is not None else "", f"<= {self.high:g}" if self.high is not None else ""]
        kind = " ".join([TYPES[self.type], *[b for b in bounds if b]])
        return " or ".join([kind, *self.choices]) if self.type is not str else (" | ".join(self.choices) or "text")

    def describe(self) -> str:
        """name, what values it takes and its default: one line of `list METHOD`."""
        default = "not set" if self.default is None else self.default
        return f"{self.name} ({self.range()}; default {default}): {self.help}"


@dataclass(frozen=True)
class Ref:
    """A function named by "module:function", with keyword arguments bound, imported at its first call: a method's
    `build` or a trainer that the registry can list without importing its module (and torch)."""

    function: str
    bound: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def to(function: str, **bound: Any) -> "Ref":
        return Ref(function, tuple(bound.items()))

    def resolve(self) -> Callable:
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **dict(self.bound), **kwargs)


def closest(key: str, names: list[str]) -> str:
    """"; did you mean X?" for the closest of names, or ""."""
    match = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


def key_values(pairs: Iterable[str], error: Callable[[str], str]) -> dict[str, str]:
    """key=value strings as a dict; a malformed pair is a SpecbenchError with error(pair) as its line."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecbenchError(error(pair))
        options[key] = value
    return options


PRESET = "preset"


def preset_option(presets: Mapping[str, str]) -> Option:
    """The preset option of a method with named settings (MethodInfo.presets)."""
    shown = "; ".join(f"{name}: {options or 'the defaults'}" for name, options in presets.items())
    return Option(PRESET, None, f"named settings ({shown}); options given beside it win", str,
                  choices=tuple(presets))


def parse_options(spec: str) -> dict[str, str]:
    """The options of name@key=value:key=value ({} for a bare name)."""
    opts = spec.partition("@")[2]
    return key_values(opts.split(":") if opts else [],
                      lambda _: f"method {spec!r}: options go as name@key=value:key=value")


def join_options(name: str, options: Mapping[str, Any]) -> str:
    """name@key=value:key=value (the bare name without options)."""
    return f"{name}@{':'.join(f'{k}={v}' for k, v in options.items())}" if options else name


@dataclass
class BuildContext:
    """What a method's builder gets: the loaded target, --draft, the method's options (declared ones only, typed,
    defaults filled in), the run's fixed costs, and every known method (for a method that builds on another, as
    samd on its auxiliary drafter)."""

    target: "LoadedModel"
    draft: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    costs: CostModel | None = None  # the run's fixed costs, for methods that size trees by cost
    methods: Mapping[str, "MethodInfo"] = field(default_factory=dict)

    def chosen_folder(self) -> "Path | None":
        """The drafter the user chose: method@head=FOLDER (heads side by side in one run), else --draft; a hub id
        (owner/name) is downloaded into the HF cache (decode.model_files.local_folder). None: the method's own
        (shipped) drafter."""
        chosen = self.options.get("head") or self.draft
        return local_folder(chosen) if chosen else None

    def option(self, key: str) -> Any:
        """A declared option's value (its default when not set)."""
        if key not in self.options:
            raise SpecbenchError(f"option {key} is read but not declared by this method (declared: "
                                 f"{', '.join(self.options) or 'none'})")
        return self.options[key]


@dataclass(frozen=True)
class MethodInfo:
    """A method as the registry lists it. `options` declares what it accepts; `tuning` lists the settings `tune`
    tries, as option strings key=value:key=value ("" = the defaults, listed first; at most TUNING_BUDGET; empty:
    nothing to tune), each checked against `options`. A row of a run is a MethodInfo whose `name` is its label
    (e.g. eagle@total_tokens=8) and whose `given` holds the options set for it (by @ and --opt)."""

    name: str
    description: str
    lossless: bool
    build: Callable[[BuildContext], "Drafter"]  # a function, or a Ref to one
    tuning: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    given: Mapping[str, str] = field(default_factory=dict)
    # Named settings (preset=NAME, declared by preset_option): "paper" is the reference code's published defaults.
    presets: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise SpecbenchError(f"method {self.name}: an option is declared twice ({', '.join(names)})")
        if bool(self.presets) != (PRESET in names):
            raise SpecbenchError(f"method {self.name}: presets and the {PRESET} option go together (preset_option)")

    @property
    def base(self) -> str:
        return self.name.partition("@")[0]

    def declared(self, key: str) -> Option | None:
        return next((o for o in self.options if o.name == key), None)

    def unknown(self, key: str, where: str = "") -> SpecbenchError:
        valid = ", ".join(o.name for o in self.options) or "none (it takes no options)"
        return SpecbenchError(f"unknown option {key} for {self.base}{where}; valid: {valid}"
                              f"{closest(key, [o.name for o in self.options])}")

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared option's value, typed: the given ones checked, the others their defaults; preset=NAME
        sets its options first (an option given beside it wins)."""
        if given.get(PRESET) is not None:
            chosen = self.declared(PRESET).parse(given[PRESET], self.base) if self.declared(PRESET) else None
            if chosen is not None:
                given = {**parse_options(f"{self.base}@{self.presets[chosen]}"), **given}
        for key in given:
            if self.declared(key) is None:
                raise self.unknown(key)
        return {o.name: o.parse(given[o.name], self.base) if o.name in given else o.default for o in self.options}

    def effective(self) -> dict[str, Any]:
        """The options this row runs with, defaults included (what records and run.json keep)."""
        return self.resolve(self.given)

    def configured(self, label: str, given: Mapping[str, str]) -> "MethodInfo":
        """This method as one row of a run: checked now, before any model loads."""
        self.resolve(given)
        return replace(self, name=label, given=dict(given))

    def drafter(self, ctx: BuildContext) -> "Drafter":
        """The drafter, built with this row's options over ctx.options (the API's keywords)."""
        return self.build(replace(ctx, options=self.resolve({**ctx.options, **self.given})))

    def check_tuning(self) -> None:
        """Every setting `tune` tries is a valid set of this method's options."""
        if len(self.tuning) > TUNING_BUDGET:
            raise SpecbenchError(f"method {self.name}: {len(self.tuning)} tuning settings, more than the budget "
                                 f"of {TUNING_BUDGET}")
        for setting in self.tuning:
            self.resolve(parse_options(f"{self.name}@{setting}"))
