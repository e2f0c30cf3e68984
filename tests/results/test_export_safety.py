"""Export writes only what the user named or a validated default (issue 37 part 2): never a file
of the run, never outside the chosen target; messages name what the user gave; non-regular files
are refused without blocking; deep or huge JSON is one line; a full disk is one line and exit 2."""

import errno
import hashlib
import json
import os
import shutil
import threading

import pytest
from test_result_dirs import run

import jaxfed
from jaxfed import cli, store
from jaxfed.store import rundir

pytestmark = pytest.mark.usefixtures("unjitted")  # tests/conftest.py: the engine op by op

pytest.importorskip("h5netcdf")


@pytest.fixture
def finished(tmp_path):
    out = tmp_path / "run"
    run(out)
    return out


def _files(out) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}


def _export(capsys, *args) -> tuple[int, str]:
    code = cli.main(["export", *map(str, args)])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    "name", ["metrics.npz", "config.json", "identity.json", "verdicts.json", "report.md", "toy.png", "chunks/CHUNK"]
)
def test_export_never_replaces_a_file_of_the_run(finished, capsys, name):
    if name == "chunks/CHUNK":
        name = "chunks/" + sorted(os.listdir(finished / "chunks"))[0]
    before = _files(finished)
    code, err = _export(capsys, finished, "--format", "csv", "--out", finished / name)
    assert code == 2 and err.count("\n") == 0 and "is a file of the run" in err and name in err
    assert _files(finished) == before
    rundir.load_results(str(finished))  # the run is intact


def test_a_file_of_the_run_is_refused_through_another_spelling(finished, capsys, monkeypatch):
    monkeypatch.chdir(finished / "chunks")
    code, err = _export(capsys, finished, "--format", "csv", "--out", "../metrics.npz")
    assert code == 2 and f"{finished / 'metrics.npz'}: is a file of the run" in err  # (--out resolved first)


def test_an_out_that_is_a_directory_is_named_as_given(finished, capsys, tmp_path):
    (tmp_path / "adir").mkdir()
    code, err = _export(capsys, finished, "--format", "csv", "--out", tmp_path / "adir")
    assert code == 2 and f"{tmp_path / 'adir'}: is a directory" in err and ".tmp" not in err


def test_a_missing_directory_of_the_out_is_named(finished, capsys, tmp_path):
    code, err = _export(capsys, finished, "--format", "csv", "--out", tmp_path / "nowhere" / "x.csv")
    assert code == 2 and "x.csv: its directory" in err and "does not exist" in err


def _forge_experiment_name(out, name):
    """A record that verifies but names the experiment ``name`` (identity and record rewritten
    together, the chunks removed: a directory copied without them)."""
    identity = json.loads((out / "identity.json").read_text())
    identity["experiment"] = name
    (out / "identity.json").write_text(json.dumps(identity))
    record = json.loads((out / "config.json").read_text())
    record.update(experiment=name, identity_sha256=store.identity_digest(identity))
    record["record_sha256"] = rundir.record_digest(record)
    (out / "config.json").write_text(json.dumps(record))
    shutil.rmtree(out / "chunks")


def test_the_default_name_from_the_record_cannot_leave_the_directory(finished, capsys, tmp_path):
    _forge_experiment_name(finished, "../../../x")
    rundir.load_results(str(finished))  # (the forged record itself verifies)
    code, err = _export(capsys, finished, "--format", "csv")
    assert code == 2 and "no plain file name" in err and "--out" in err
    assert not (tmp_path.parent.parent / "x.csv").exists()  # where DIR/../../../x.csv lands


def test_a_good_default_name_is_written_in_the_directory(finished, capsys):
    code = cli.main(["export", str(finished), "--format", "csv"])
    assert code == 0 and (finished / "toy.csv").is_file()


def _with_timeout(fn, seconds=20):
    """fn()'s exception (or None); fails the test when fn blocks."""
    box: list = []

    def target():
        try:
            fn()
            box.append(None)
        except BaseException as err:  # noqa: BLE001
            box.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, "blocked"
    return box[0]


@pytest.mark.parametrize("name", ["config.json", "metrics.npz", "identity.json", "verdicts.json", "CHUNK"])
def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(finished, name):
    rundir.write_verdicts(str(finished), [])
    if name == "CHUNK":
        name = "chunks/" + sorted(os.listdir(finished / "chunks"))[0]
    os.remove(finished / name)
    os.mkfifo(finished / name)
    read = (
        (lambda: jaxfed.verdicts(str(finished))) if name == "verdicts.json" else lambda: jaxfed.open_results(finished)
    )
    err = _with_timeout(read)
    assert isinstance(err, ValueError) and name in str(err)
    assert "is not a regular file" in str(err) or "is not a chunk of the run" in str(err)
    err = _with_timeout(lambda: jaxfed.results.export(str(finished), "csv", out=str(finished.parent / "t.csv")))
    assert name == "verdicts.json" or isinstance(err, ValueError)


def test_deeply_nested_json_is_one_line(finished, capsys):
    (finished / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"config\.json: not readable JSON \(RecursionError"):
        jaxfed.open_results(finished)
    code, err = _export(capsys, finished, "--format", "csv", "--out", finished.parent / "t.csv")
    assert code == 2 and err.startswith("jaxfed: error:") and err.count("\n") == 0


def test_huge_json_is_refused_before_it_is_read(finished, monkeypatch):
    monkeypatch.setattr(store.files, "MAX_JSON_BYTES", 100)
    with pytest.raises(ValueError, match=r"config\.json: is [\d,]+ bytes, more than the 100 read"):
        jaxfed.open_results(finished)


@pytest.mark.parametrize("fmt", ["csv", "netcdf", "parquet"])
def test_a_full_disk_during_an_export_is_one_line_and_exit_2(finished, capsys, monkeypatch, tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")

    def full(path, parts):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store.files, "_write_file", full)
    target = tmp_path / f"mine.{fmt}"
    code, err = _export(capsys, finished, "--format", fmt, "--out", target)
    assert code == 2 and err.count("\n") == 0 and f"cannot write {target}: No space left on device" in err
    assert not any(p.name.startswith("mine.") for p in tmp_path.iterdir())  # no temporary left


def test_netcdf_export_reads_back(finished, tmp_path):
    xr = pytest.importorskip("xarray")
    path = jaxfed.results.export(str(finished), "netcdf", out=str(tmp_path / "d.nc"))
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["x"].shape == (2, 6, 3)


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_an_out_that_is_a_fifo_socket_or_device_is_refused_and_left_alone(finished, capsys, tmp_path, kind):
    """An export renames its file over --out: a FIFO, socket or device node there (as /dev/full) is
    refused in one line and stays what it was, whoever runs the export."""
    import socket
    import stat

    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    elif kind == "socket":
        target = tmp_path / "sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    else:
        target = "/dev/null"  # (a character device every system has; never replaced: the export is refused)
    before = os.lstat(target)
    code, err = _export(capsys, finished, "--format", "csv", "--out", target)
    assert code == 2 and err.count("\n") == 0 and "is a device, FIFO or socket" in err and str(target) in err
    after = os.lstat(target)
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)
    if kind == "socket":
        server.close()


def test_an_empty_out_and_a_config_that_is_no_file_are_exact(finished, capsys):
    code, err = _export(capsys, finished, "--format", "csv", "--out", "")
    assert code == 2 and err.endswith("--out is empty; give the file to write"), err
    os.remove(finished / "config.json")
    os.mkfifo(finished / "config.json")
    code, err = _export(capsys, finished, "--format", "csv")
    assert code == 2 and "config.json: is not a regular file" in err and "no config.json" not in err, err
