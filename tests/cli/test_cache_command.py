"""`jaxfed cache info|clear`, the compilation cache a user can trust: what is in it, removing only
its own entries, a clear line when it cannot be used, and hits in a second process on several
host devices."""

import os
import subprocess
import sys

import pytest
from support import POINTS, one_line_error, run_cli, trial

from jaxfed import cli, engine
from jaxfed.engine import compiled


def cache_command(capsys, *args) -> str:
    assert cli.main(["cache", *args]) == 0
    return capsys.readouterr().out


def test_info_counts_the_compiled_programs_and_clear_removes_only_them(tmp_path, capsys):
    cache = tmp_path / "cache"
    compiled._KEPT.clear()  # (compiled anew, so that the cache is written)
    engine.run(trial, POINTS, 23, micro_batch=64, compilation_cache=str(cache), progress=False)
    out = cache_command(capsys, "info", "--compilation-cache", str(cache))
    info = engine.cache_info(str(cache))
    assert info.entries >= 1 and info.bytes > 0 and info.writable
    assert f"compilation cache: {cache}\n" in out and f"compiled programs: {info.entries}, " in out
    assert "writable: yes" in out
    (cache / "notes.txt").write_text("mine")  # a cache pointed at a directory that holds other files
    out = cache_command(capsys, "clear", "--compilation-cache", str(cache))
    assert out.startswith(f"removed {info.entries} compiled program(s), ") and str(cache) in out
    assert os.listdir(cache) == ["notes.txt"]  # the lock folder went with its locks
    assert engine.cache_info(str(cache)).entries == 0
    assert "compiled programs: 0, 0.0 KiB" in cache_command(capsys, "info", "--compilation-cache", str(cache))


def test_info_says_when_the_cache_is_off_absent_or_not_writable(tmp_path, capsys, monkeypatch):
    assert "compilation cache: off" in cache_command(capsys, "info", "--compilation-cache", "off")
    monkeypatch.setenv(engine.CACHE_ENV, "off")
    assert "compilation cache: off" in cache_command(capsys, "info")
    fresh = tmp_path / "new"
    out = cache_command(capsys, "info", "--compilation-cache", str(fresh))
    assert "(not created yet: the first run creates it)" in out and "writable: yes" in out
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = cache_command(capsys, "info", "--compilation-cache", str(blocker / "cache"))
    assert "(absent)" in out and "writable: no (runs compile without it and say so" in out
    for action in ("info", "clear"):  # (issue 59: a file is not a cache folder, not an absent one)
        err = one_line_error(capsys, ["cache", action, "--compilation-cache", str(blocker)])
        assert f"--compilation-cache {blocker}: is a file, not a cache folder" in err and "(absent)" not in err
    assert blocker.read_text() == "x"
    monkeypatch.setenv(engine.CACHE_ENV, str(blocker))
    err = one_line_error(capsys, ["cache", "info"])
    assert f"${engine.CACHE_ENV} {blocker}: is a file, not a cache folder" in err


def test_a_run_whose_cache_cannot_be_written_says_so_in_one_line_and_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = run_cli(
        "run", "gfvl-topologies", "--trials", "64", "--set", "n_slots=5", "--out", str(tmp_path / "run"),
        "--compilation-cache", str(blocker / "cache"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "cannot be used" in line]
    assert len(notes) == 1 and f"compilation cache {blocker / 'cache'} cannot be used" in notes[0], done.stderr
    assert "compiling without it" in notes[0]


TWO_DEVICES = """
import sys
sys.path[:0] = [{tests!r}]
from support import POINTS, trial
from jaxfed import engine
out = engine.run(trial, POINTS, 128, devices=2, micro_batch=64, compilation_cache={cache!r}, progress=False)
assert out.info["devices"] == 2
print(out.info["compile_cached"][0])
"""


@pytest.mark.slow  # (two processes that start JAX: ~10 s)
def test_a_second_process_on_two_host_devices_compiles_nothing(tmp_path):
    """The first process compiles the trial program once (for its first device) and caches it;
    a second process on as many devices takes it from the cache for both devices. (Another
    device count misses: JAX keys an executable by the CPU's device count, docs/performance.md.)"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    script = TWO_DEVICES.format(tests=os.path.dirname(os.path.dirname(__file__)), cache=str(tmp_path / "cache"))
    cached = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        cached.append(done.stdout.strip().splitlines()[-1])
    assert cached == ["False", "True"]
    assert engine.cache_info(str(tmp_path / "cache")).entries == 1 + 1  # the trial program, the raw flags


def test_clear_removes_nothing_of_the_users_in_a_folder_the_cache_points_at(tmp_path, capsys):
    """The cache pointed at a folder of the user's: files named like JAX's suffixes but not like its
    program keys, subfolders, folders named like jaxfed's holding the user's files, and a symlink named
    like an entry all stay; only the entries JAX wrote and jaxfed's own lock files go. Through a
    symlinked cache directory, clear refuses in one line and removes nothing."""
    cache = tmp_path / "mine"
    compiled._KEPT.clear()
    engine.run(trial, POINTS, 23, micro_batch=64, compilation_cache=str(cache), progress=False)
    entries = sorted(p.name for p in cache.iterdir() if p.is_file())
    assert entries and all(name.endswith(("-cache", "-atime")) for name in entries)
    key = "jit_user-" + "a" * 64
    users = {
        "browser-cache": "b",
        "last-atime": "a",
        "sub/a-cache": "s",
        "jaxfed-compiling/notes.txt": "n",
        "jaxfed-memory/0123.json": "{}",
        "jaxfed-rejected/readme": "r",
        "elsewhere/" + key + "-cache": "the target of a symlink",
    }
    for name, text in users.items():
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_text(text)
    (cache / (key + "-cache")).symlink_to(cache / "elsewhere" / (key + "-cache"))
    linked = tmp_path / "linked"
    linked.symlink_to(cache)
    err_before = engine.cache_info(str(cache)).entries
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(["cache", "clear", "--compilation-cache", str(linked)]))
    assert exc.value.code == 2 and "is a symlink" in capsys.readouterr().err
    assert engine.cache_info(str(cache)).entries == err_before
    out = cache_command(capsys, "clear", "--compilation-cache", str(cache))
    assert out.startswith(f"removed {err_before} compiled program(s)")
    for name, text in users.items():
        assert (cache / name).read_text() == text, name
    assert (cache / (key + "-cache")).is_symlink()
    assert not any((cache / name).exists() for name in entries)
