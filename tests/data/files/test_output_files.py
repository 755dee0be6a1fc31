"""The temporary files of atomic writes that a killed process left are found and removed."""

from __future__ import annotations

from partgnn.data.files.output_files import remove_stale_temporaries


def test_stale_temporary_files_are_removed(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    stale = [tmp_path / "checkpoints" / ".last.pt.abc123.tmp", tmp_path / ".metrics.csv.x.tmp"]
    for path in stale:
        path.write_bytes(b"half")
    kept = tmp_path / "checkpoints" / "last.pt"
    kept.write_bytes(b"whole")
    assert sorted(remove_stale_temporaries(tmp_path, tmp_path / "checkpoints")) == sorted(stale)
    assert not any(path.exists() for path in stale)
    assert kept.exists()
