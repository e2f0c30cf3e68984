"""Which build computed a run: the JAX and jaxlib versions, the backend and the processor.

A trial's program is compiled by XLA for the machine it runs on: another JAX or jaxlib version
compiles it with another XLA, and on a CPU XLA compiles for the host processor (LLVM's target:
its vendor, family and model, and the instruction sets it has, AVX-512 or FMA or SVE), so the
same seed gives values that differ in their last bits on another CPU model or JAX version (3.4% of
a 2,000-trial run's values, by at most 5.2e-7 relative, between jax 0.10.2 and 0.12.1). A result
directory records the build of every machine that computed its trials (``build.json``, written by
:mod:`jaxfed.store`) so that a run is not grown, resumed or merged with trials of another build
without a word, and ``jaxfed verify`` can tell "computed elsewhere" from "values differ".

A build is a JSON dict (:func:`this_build`); two builds give the same bits when
:func:`same_bits` says so, which compares :data:`FIELDS` alone.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess

import jax
import jaxlib  # (imported by jax itself: only its version is read)

FIELDS = ("jax", "jaxlib", "backend", "processor", "cpu", "features")
"""What decides a trial's bits, besides the run's identity: the JAX and jaxlib versions, the
backend (``cpu``, ``gpu``, ``tpu``), the processor (a CPU's model name, an accelerator's device
kind), a CPU's vendor, family and model (what LLVM picks its target by; a virtual machine's model
name often says only "AMD EPYC") and its instruction-set features of :data:`FEATURES`."""

FEATURES = re.compile(r"sse4_[12]|sse4a|avx.*|fma4?|f16c|amx.*|asimd.*|neon|sve.*|i8mm|bf16|fp16|fphp")
"""The CPU feature flags that change what XLA's CPU code computes (vector widths, fused
multiply-adds, half and bfloat16 arithmetic), as ``/proc/cpuinfo`` and sysctl spell them; the other
flags (security mitigations, virtualisation, timers) change no value."""


@functools.cache
def _cpu() -> tuple[str, str, tuple[str, ...]]:
    """(model name, "VENDOR family F model M", sorted features of :data:`FEATURES`) of this CPU:
    from ``/proc/cpuinfo`` on Linux, sysctl on macOS, :mod:`platform` elsewhere; what cannot be
    read is "" (compared as it is: two machines that both say nothing are taken as one)."""
    if os.path.isfile("/proc/cpuinfo"):
        return cpuinfo_fields(_read("/proc/cpuinfo"))
    if platform.system() == "Darwin":
        brand = _sysctl("machdep.cpu.brand_string")
        flags = (_sysctl("machdep.cpu.features") + " " + _sysctl("machdep.cpu.leaf7_features")).lower()
        arm = [name.lower().removeprefix("hw.optional.arm.feat_") for name in _sysctl_true("hw.optional.arm.")]
        return brand, platform.machine(), _features(flags.replace(".", "_").split() + arm)
    return platform.processor(), platform.machine(), ()


def cpuinfo_fields(text: str) -> tuple[str, str, tuple[str, ...]]:
    """(model name, "VENDOR family F model M", features) read from the text of ``/proc/cpuinfo``
    (its first processor: every core of a machine runs the same code).

    Args:
        text: the file's text (x86: ``model name``, ``vendor_id``, ``cpu family``, ``model``,
            ``flags``; ARM: ``CPU implementer``, ``CPU part``, ``Features``).

    Returns:
        The three strings; "" for what the text does not say.
    """
    first = text.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name", "")
    if "vendor_id" in fields:
        cpu = f"{fields['vendor_id']} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    elif "cpu implementer" in fields:  # (ARM: the implementer and part decide LLVM's target)
        cpu = f"arm implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    else:
        cpu = platform.machine()
    return model, cpu, _features((fields.get("flags") or fields.get("features") or "").split())


def _features(flags) -> tuple[str, ...]:
    return tuple(sorted({f for f in flags if FEATURES.fullmatch(f)}))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _sysctl_true(prefix: str) -> list[str]:
    """The sysctl names under ``prefix`` whose value is 1 (macOS's ``hw.optional.arm.FEAT_*``)."""
    try:
        text = subprocess.run(["sysctl", prefix], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [name.strip() for name, _, value in (line.partition(":") for line in text.splitlines()) if value.strip() == "1"]  # fmt: skip


def this_build(backend: str | None = None) -> dict:
    """The build this process computes trials with on ``backend``.

    Args:
        backend: ``"cpu"``, ``"gpu"``, … (default: JAX's default backend).

    Returns:
        A JSON dict with the keys of :data:`FIELDS`: ``jax`` and ``jaxlib`` versions, ``backend``,
        ``processor`` (a CPU's model name; an accelerator's device kind, e.g. "NVIDIA H100 80GB
        HBM3"), ``cpu`` (vendor, family and model) and ``features`` (a sorted list); on an
        accelerator ``cpu`` and ``features`` are the host's, which compiles nothing of a trial, so
        they are left empty.
    """
    backend = backend or jax.default_backend()
    if backend == "cpu":
        processor, cpu, features = _cpu()
    else:
        processor, cpu, features = _device_kind(backend), "", ()
    return {
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", ""),
        "backend": backend,
        "processor": processor,
        "cpu": cpu,
        "features": list(features),
    }


def _device_kind(backend: str) -> str:
    """The device kind of ``backend``'s first device ("NVIDIA H100 80GB HBM3", "TPU v5 lite"), or ""
    where JAX has no such backend (a platform named by a stored run, not this machine's)."""
    try:
        return str(jax.devices(backend)[0].device_kind)
    except RuntimeError:
        return ""


def key(build: dict) -> tuple:
    """What of a build decides its bits (the values of :data:`FIELDS`), hashable."""
    return tuple(_json_key(build.get(field)) for field in FIELDS)


def _json_key(value):
    """A field's value as compared: a list (``features``, as JSON gives it back) as a tuple."""
    return tuple(value) if isinstance(value, list) else value


def same_bits(a: dict, b: dict) -> bool:
    """Whether two builds compute a trial to the same bits: equal in every field of :data:`FIELDS`.

    Args:
        a, b: builds (:func:`this_build`, or as a result directory records them).

    Returns:
        True when nothing that decides the compiled code differs.
    """
    return key(a) == key(b)


def describe(build: dict) -> str:
    """A build in a few words: ``jax 0.10.2 (jaxlib 0.10.2), cpu AMD EPYC (AuthenticAMD family 25
    model 1; avx avx2 fma …)``; an accelerator: ``jax 0.10.2 (jaxlib 0.10.2), gpu NVIDIA H100``."""
    where = f"{build.get('backend', '?')} {build.get('processor') or '(processor unknown)'}"
    details = " ".join(str(build.get("cpu") or "").split())
    features = " ".join(build.get("features") or [])
    if details or features:
        where += f" ({'; '.join(part for part in (details, features) if part)})"
    return f"jax {build.get('jax', '?')} (jaxlib {build.get('jaxlib', '?')}), {where}"


def short(build: dict) -> str:
    """:func:`describe` without the CPU features (which :func:`feature_note` names where they differ)."""
    return describe(dict(build, features=[]))


def feature_note(stored: dict, here: dict, names: tuple[str, str] = ("there", "here")) -> str:
    """`` (features only there: avx512f, only here: sve)`` where the two builds' CPU features
    differ, else ""; ``names``: what to call the two builds."""
    features = [d for d in differences(stored, here, names) if d.startswith("features")]
    return f" ({'; '.join(features)})" if features else ""


def differences(stored: dict, here: dict, names: tuple[str, str] = ("there", "here")) -> list[str]:
    """What differs between two builds, in words (``jax 0.10.2 there, 0.12.1 here``, ``features
    only there: avx512f``, …), in the order of :data:`FIELDS`; ``names``: what to call the two."""
    out = []
    for field in FIELDS:
        a, b = stored.get(field), here.get(field)
        if _json_key(a) == _json_key(b):
            continue
        if field == "features":
            there, mine = sorted(set(a or ()) - set(b or ())), sorted(set(b or ()) - set(a or ()))
            parts = [f"only {names[0]}: {' '.join(there)}" if there else "", f"only {names[1]}: {' '.join(mine)}" if mine else ""]  # fmt: skip
            out.append("features " + ", ".join(p for p in parts if p))
        else:
            out.append(f"{field} {a or '(none)'} {names[0]}, {b or '(none)'} {names[1]}")
    return out


def remedy(stored: dict, here: dict) -> str:
    """How to compute with ``stored``'s build on a machine of ``here``'s: the pip line for its
    versions, and the machine it needs (``pip install jax==0.10.2 jaxlib==0.10.2 on a cpu AMD
    EPYC (…)``)."""
    steps = []
    if (stored.get("jax"), stored.get("jaxlib")) != (here.get("jax"), here.get("jaxlib")):
        steps.append(f"pip install jax=={stored.get('jax')} jaxlib=={stored.get('jaxlib')}")
    if any(_json_key(stored.get(f)) != _json_key(here.get(f)) for f in ("backend", "processor", "cpu", "features")):
        steps.append("on a " + describe(stored).split(", ", 1)[1])
    return " ".join(steps) or "with its build"
