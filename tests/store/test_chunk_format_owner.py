"""The stored chunk has one owner: only ``jaxfed/store/chunks.py`` spells the chunk folder, the header
key, a chunk file's name or the ``NAME/FIELD`` split of a summary file (read from the source with
``ast``; docstrings and comments may name them). Everything else goes through the store's view
(``list_chunks``, ``read_chunk``, ``read_summary``, ``finish_summaries``); a copy of the format
elsewhere is how three readers came to disagree."""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest

from jaxfed import stats, store

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jaxfed"
OWNER = PACKAGE / "store" / "chunks.py"

SPELLINGS = {
    "the chunk folder": re.compile(r"(^|/)chunks(/|$)"),
    "the header key": re.compile(r"__meta__"),
    "a chunk file's name": re.compile(r"summary_g|_t\d|^g\d"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def spelled_outside_the_store(root: pathlib.Path = PACKAGE, owner: pathlib.Path = OWNER) -> list[str]:
    """``file:line what`` for every string constant outside ``owner`` that spells a part of the
    chunk format, and every ``.rsplit("/", …)`` (the summary file's NAME/FIELD split)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == owner:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [f"{where} spells {what}" for what, rx in SPELLINGS.items() if rx.search(node.value)]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "rsplit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "/"
            ):
                found.append(f"{where} splits NAME/FIELD")
    return found


def test_only_the_store_spells_the_chunk_format():
    assert spelled_outside_the_store() == []


def test_the_guard_finds_a_copy(tmp_path):
    """The guard itself: a module that lists chunks by hand, reads the header key and splits the
    keys is found on each line (so the empty list above means something)."""
    (tmp_path / "jaxfed").mkdir()
    (tmp_path / "jaxfed" / "store.py").write_text('CHUNKS = "chunks"\n')
    (tmp_path / "jaxfed" / "copy.py").write_text(
        '"""A docstring may say chunks/ and __meta__."""\n'
        "import os\n"
        'names = os.listdir(os.path.join("run", "chunks"))\n'
        'header = arrays["__meta__"]\n'
        'metric, field = "m/count".rsplit("/", 1)\n'
        'name = f"summary_g{1:03d}.npz"\n'
    )
    found = spelled_outside_the_store(tmp_path / "jaxfed", tmp_path / "jaxfed" / "store.py")
    assert sorted(f.split(" ", 1)[0] for f in found) == [
        "jaxfed/copy.py:3",
        "jaxfed/copy.py:4",
        "jaxfed/copy.py:5",
        "jaxfed/copy.py:6",
    ], found


@pytest.mark.parametrize(
    "name, parsed",
    [
        ("g000_t0000000000_0000000064.npz", ("raw", 0, 0, 64, True)),
        ("g0001_t0000000064_0000000128.npz", ("raw", 1, 64, 128, False)),
        ("summary_g002.npz", ("summary", 2, 0, 0, True)),
        ("summary_g0002.npz", ("summary", 2, 0, 0, False)),
        ("g000_t0_64.npz", None),
        ("summary_g002.npz.123.tmp", None),
        ("notes.txt", None),
    ],
)
def test_chunk_names_parse(name, parsed):
    chunk = store.ChunkName.parse(name)
    got = None if chunk is None else (chunk.kind, chunk.group, chunk.start, chunk.stop, chunk.canonical)
    assert got == parsed


def test_list_chunks_refuses_a_linked_folder(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "summary_g000.npz").write_bytes(b"")
    (tmp_path / "run").mkdir()
    assert store.list_chunks(str(tmp_path / "run")) == []  # no folder: no chunks
    (tmp_path / "run" / store.CHUNK_DIR).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(store.StoreError, match="symbolic link"):
        store.list_chunks(str(tmp_path / "run"))


def test_finish_summaries_counts_the_tail_of_the_points_that_ran_to_the_end():
    """The tail rule: a point with the most trials has its tail summarised after its whole blocks;
    a point that stopped early (at a whole block) has none, whatever its tail rows hold."""
    block = stats.summary.SUMMARY_BLOCK
    values = np.arange(2 * (block + 3), dtype=np.float32).reshape(2, block + 3) + 1
    whole = stats.summary.chunk_summary(values[:, :block], block, np, n_blocks=1)
    state = stats.summary.fold(stats.summary.empty_state((2,)), whole, 1)
    tails = values[:, block:]
    (final, summary) = store.finish_summaries({"m": state}, {"m": tails}, [block + 3, block])["m"]
    assert final.count.tolist() == [block + 3, block]
    np.testing.assert_allclose(summary.mean, [values[0].mean(), values[1, :block].mean()], rtol=1e-6)
