"""What a new user hit: `reproduce --only`, the notebooks' install extra, `jaxfed show` describing
every field with the values a choice takes, the report path printed once (tests/engine/test_progress.py)."""

import dataclasses
import re
from pathlib import Path

import pytest

from jaxfed import cli, oac
from jaxfed.experiments import REGISTRY
from jaxfed.experiments.gfvl.logistic import SPLITS
from jaxfed.gfvl import graphs, natgrad
from jaxfed.oac import kmeans
from jaxfed.runs import describe, reproduce

ROOT = Path(__file__).resolve().parents[2]

# Each choice parameter of the built-in experiments and the values the code accepts.
CHOICES = {
    "vmax_rule": kmeans.VMAX_RULES,
    "init": kmeans.INITS,
    "inits": kmeans.INITS,
    "channel": oac.channel.names(),
    "symbol_energy": ("beta", "sqrt-beta"),
    "topologies": graphs.names(),
    "splits": SPLITS,
    "baseline": natgrad.BASELINES,
    "loss_normalisation": ("sum", "mean"),
}
UNRESOLVED = re.compile(r"one of ((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*|[A-Z][A-Z0-9_]+)")


@pytest.mark.parametrize("only", ["gfvl-topologies,no-such-one", "", " , "])
def test_reproduce_only_an_unknown_name_is_one_line_listing_the_known_ones(only, capsys, tmp_path):
    assert cli.main(["reproduce", "--only", only, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("jaxfed: error: --only: unknown experiment"), err
    assert all(name in err for name in REGISTRY)
    assert not any(tmp_path.iterdir())  # refused before anything ran


def test_reproduce_only_runs_the_named_experiments_in_the_order_given():
    chosen = reproduce.reproduced(" kmeans-snr,gfvl-topologies,kmeans-snr")
    assert [exp.name for exp in chosen] == ["kmeans-snr", "gfvl-topologies"]
    assert reproduce.reproduced(None) == list(REGISTRY.values())


def test_the_notebooks_have_an_install_extra_and_a_readme_line():
    # (read as text: tomllib is not in Python 3.10's standard library)
    assert re.search(r'^notebooks = \["jupyterlab', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert '".[notebooks]"' in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", list(REGISTRY))
def test_show_describes_every_field_and_writes_out_every_choice(name):
    for p in describe.parameters(REGISTRY[name].config_cls):
        assert p.meaning.strip(), f"{name}: {p.name} has no description"
        assert not UNRESOLVED.search(p.meaning), f"{name}: {p.name}: {p.meaning}"
        for value in CHOICES.get(p.name, ()):
            assert f'"{value}"' in p.meaning, f"{name}: {p.name} does not list {value!r}: {p.meaning}"


def test_show_explains_choice_and_lists_the_vmax_rules(capsys):
    assert cli.main(["show", "kmeans-snr"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # (wrapped at 100 columns)
    assert "[choice]" in out and describe.CHOICE_LEGEND in out
    assert 'one of "abs", "signed", "abs-previous", "signed-previous"' in out and "VMAX_RULES" not in out


OPTIONS = ("a", "b")


@dataclasses.dataclass(frozen=True)
class WrappedConfig:
    mode: str = "a"  # one of OPTIONS
    other: tuple[str, ...] = (
        "a",  # one of no_such_module.NAMES (a comment inside a default the formatter keeps on several lines)
        "b",
    )
    last: int = 1  # first line,
    # and its continuation
    mid: int = 0  # its own
    # the comment of the field below, which has none of its own
    above: int = 2


def test_comments_inside_wrapped_defaults_continuations_and_above_a_field_are_read_unknown_references_kept():
    meanings = {p.name: p.meaning for p in describe.parameters(WrappedConfig)}
    assert meanings == {
        "mode": 'one of "a", "b"',
        "other": "one of no_such_module.NAMES (a comment inside a default the formatter keeps on several lines)",
        "last": "first line, and its continuation",
        "mid": "its own",
        "above": "the comment of the field below, which has none of its own",
    }
