"""python -m ffpa.bench on the cpu: a table, a CSV with one row per shape,
and shapes it cannot parse refused by argparse (exit 2)."""

import csv

import pytest

from ffpa import bench


def test_bench_cpu_csv(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert bench.main(["--device", "cpu", "--shape", "1,2,1,32,48,16", "--shape", "1,2,2,16,16,24,8",
                       "--backward", "--reps", "1", "--warmup", "0", "--csv", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert [r["shape"] for r in rows] == ["1,2,1,32,48,16,16", "1,2,2,16,16,24,8"]
    assert all(float(r["ffpa_ms"]) > 0 and float(r["sdpa_ms"]) > 0 for r in rows)
    assert "speedup" in capsys.readouterr().out


@pytest.mark.parametrize("shape", ["1,2,3", "1,3,2,8,8,16", "1,2,2,8,8,0"])
def test_bench_refuses_bad_shapes(shape):
    with pytest.raises(SystemExit) as e:
        bench.main(["--device", "cpu", "--shape", shape])
    assert e.value.code == 2
