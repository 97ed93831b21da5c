"""The perf tooling's CPU side: decode_peers.py writes kvlab rows (from kvlab_decode_check's
CSV) into the kvlab result schema that analysis.load reads, and target_table.py turns such a
file into the P1-P9 table. Peers themselves need a GPU (not run here: --no-peers)."""
import os
import subprocess
import sys

import pytest

from analysis.load import ResultFileError, load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "experiments", "peers", "decode_peers.py")
TABLE = os.path.join(ROOT, "experiments", "peers", "target_table.py")

HEADER = ("target,batch,context,lengths,kv_format,layout,gqa_group,block_size,graph,version,status,reason,median_us,"
          "q1_us,q3_us,rel_iqr,reps,bytes,gbps,pct_ceiling,pct_datasheet,rel_l2\n")
ROWS = [
    'P1,64,8192,uniform,bf16,nhd,4,16,0,v4_mma_decode,ok,"",750.0,745,755,0.013,20,2147483648,2863.3,94.5,85.4,3.1e-05',
    'P1,64,8192,uniform,bf16,nhd,4,16,0,v5_mma_decode_2stage,ok,"",740.0,735,745,0.013,20,2147483648,2901.9,95.8,86.6,3.1e-05',
    'P1,64,8192,uniform,fp8_e4m3,nhd,4,16,0,v5_mma_decode_2stage,ok,"",390.0,385,395,0.02,20,1073741824,2753.2,90.9,82.1,5e-06',
    'P2,1,32768,uniform,bf16,nhd,4,16,0,v3_flash_decoding,failed,"validation failed",0,0,0,0,0,0,0,0,0,1e-1',
    'P8,1,1024,uniform,bf16,nhd,4,16,1,v5_mma_decode_2stage,ok,"",8.9,8.8,9.0,0.01,50,4206592,472.6,15.6,14.1,3e-05',
    'P9,65536,0,uniform,bf16,nhd,0,16,0,append_kv,ok,"pct_ceiling is of the copy ceiling",240.0,239,241,0.004,20,537395200,2239.1,75.2,66.8,0',
]


def write_csv(path):
    with open(path, "w") as f:
        f.write("# device=NVIDIA H100 80GB HBM3;read_ceiling=3.03e12;copy_ceiling=2.97e12;datasheet=3.352e12\n")
        f.write(HEADER)
        f.write("\n".join(ROWS) + "\n")


@pytest.fixture
def perf_h5(tmp_path):
    csv_path, h5 = tmp_path / "decode.csv", tmp_path / "perf.h5"
    write_csv(csv_path)
    r = subprocess.run([sys.executable, PEERS, "--kvlab-csv", str(csv_path), "--out", str(h5), "--no-peers"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return h5


def test_rows_land_in_the_kvlab_schema(perf_h5):
    res = load(str(perf_h5))
    idx = res.index
    assert len(idx) == len(ROWS)
    assert abs(res.read_ceiling - 3.03e12) < 1e6 and abs(res.copy_ceiling - 2.97e12) < 1e6
    assert res.attrs["device_name"] == "NVIDIA H100 80GB HBM3"
    assert sorted(set(idx["kind"])) == ["append", "decode_attention"]
    assert list(idx[idx["target"] == "P9"]["kind"]) == ["append"]
    assert set(idx["status"]) == {"ok", "failed"}
    v5 = idx[(idx["version"] == "v5_mma_decode_2stage") & (idx["kv_format"] == "bf16") & (idx["target"] == "P1")].iloc[0]
    assert v5["median_us"] == 740.0 and v5["batch"] == 64 and v5["context"] == 8192 and v5["graph"] == "off"
    assert abs(v5["bytes_per_s"] - 2901.9e9) < 1e6 and v5["pct_read_ceiling"] == pytest.approx(95.8)
    failed = idx[idx["status"] == "failed"].iloc[0]
    assert failed["reason"] == "validation failed" and failed["median_us"] != failed["median_us"]  # NaN, not 0
    keys = list(idx["key"])
    assert len(set(keys)) == len(keys), "every (point, version) row has its own key"


def test_target_table_reads_the_file(perf_h5):
    r = subprocess.run([sys.executable, TABLE, str(perf_h5)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "P1  64 x 8k bf16" in out and "95.8 %" in out and "v5_mma_decode_2stage" in out  # the best version wins
    assert "1.90x" in out  # P5: 740 / 390
    assert "8.9 us" in out and "P9" in out and "75.2 % of copy" in out


def test_missing_csv_is_an_error(tmp_path):
    r = subprocess.run([sys.executable, PEERS, "--kvlab-csv", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "x.h5"),
                        "--no-peers"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    with pytest.raises(ResultFileError):
        load(str(tmp_path / "x.h5"))
