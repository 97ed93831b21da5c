"""The real-model kinds (real_kv_error, model_quality) and their figures, on a small random
Llama GGUF written here (gguf-py's writer) and imported with `kvlab model import`."""
import os

import h5py
import numpy as np
import pytest

from tests.python import model_fixtures


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, kvlab_bin):
    return model_fixtures.tiny_model(kvlab_bin, tmp_path_factory.mktemp("tiny"))


def ini(model, body):
    return f"name = t\n{body}".replace("MODEL", str(model))


def test_model_quality_rows(run, tiny_model, tmp_path):
    cfg = tmp_path / "q.ini"
    cfg.write_text(ini(tiny_model, """
[q]
kind = model_quality
model = MODEL
text = a, b
context = 200
k_format = bf16, fp8_e4m3_per_tensor, nvfp4, mxfp4
v_format = bf16, nvfp4
hadamard = 0, 64
where = hadamard == 0 || k_format == "mxfp4"
[layers]
kind = model_quality
model = MODEL
text = a
context = 200
k_format = mxfp4
v_format = mxfp4
bf16_layers = none, 0, 0+1
"""))
    out = tmp_path / "q.h5"
    r = run("sweep", cfg, "--out", out, "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out) as f:
        ix = {k: f["index"][k][()] for k in f["index"].keys()}
        s = lambda c: [x.decode() if isinstance(x, bytes) else x for x in ix[c]]
        status = s("status")
        assert set(status) == {"ok"}, set(zip(status, s("reason")))
        k, v, had = s("k_format"), s("v_format"), ix["hadamard"]
        kld, dppl, agree, bpt = ix["kld_mean"], ix["dppl"], ix["top1_agree"], ix["bytes_per_token"]
        path = s("kv_path")
        layers = s("bf16_layers")
        for i in range(len(k)):
            if k[i] == v[i] == "bf16" and layers[i] == "none":
                assert kld[i] == 0 and dppl[i] == 0 and agree[i] == 1 and path[i] == "paged:bf16"
            elif layers[i] == "0+1":  # every layer kept in BF16: the baseline itself
                assert kld[i] == 0 and bpt[i] == bpt[s("k_format").index("bf16")]
            else:
                assert kld[i] > 0, (k[i], v[i])
            if k[i] == v[i] == "nvfp4" and had[i] == 0:
                assert path[i] == "paged:nvfp4"
            if k[i] != v[i] or had[i]:
                assert path[i] == "scheme-coded"
        # bytes per token: 2 layers x 1 KV head x (K + V) rows of 64 values
        i = next(j for j in range(len(k)) if k[j] == v[j] == "bf16")
        assert bpt[i] == 2 * 1 * 2 * 64 * 2
        i = next(j for j in range(len(k)) if k[j] == v[j] == "nvfp4" and had[j] == 0)
        assert bpt[i] == 2 * 1 * 2 * (32 + 4)
        # a BF16 layer lowers the error of mxfp4 (on this random model, at least not raise it a lot)
        g = next(j for j in range(len(k)) if layers[j] == "none" and s("study")[j] == "layers")
        grp = f["index"]["group"][()][g].decode()
        pos = f[grp]["positions"]
        assert len(pos["kld"][()]) == 199
        assert np.isclose(np.mean(pos["kld"][()]), kld[g])
        assert f[grp]["layers"]["storage"].asstr()[()].tolist() == ["paged:mxfp4"] * 2


def test_real_kv_error_rows_and_figures(run, tiny_model, tmp_path):
    cfg = tmp_path / "r.ini"
    cfg.write_text(ini(tiny_model, """
[r]
kind = real_kv_error
model = MODEL
text = a
tokens = 128
tensor = k_pre_rope, k_post_rope, v
scheme = fp8_e4m3_per_token, nvfp4, mxfp4, fp8_ds_mla
hadamard = 0, 64
[one]
kind = real_kv_error
model = MODEL
text = a
tokens = 128
layer = 1
scheme = bf16
[q]
kind = model_quality
model = MODEL
text = a
context = 128
k_format = bf16, nvfp4, fp8_e4m3_per_tensor
v_format = bf16, nvfp4, fp8_e4m3_per_tensor
where = k_format == v_format
"""))
    out = tmp_path / "r.h5"
    r = run("sweep", cfg, "--out", out, "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out) as f:
        ix = f["index"]
        kind = ix["kind"].asstr()[()]
        scheme = ix["scheme"].asstr()[()]
        status = ix["status"].asstr()[()]
        rel = ix["rel_l2_mean"][()]
        layers = ix["layers_measured"][()]
        real = kind == "real_kv_error"
        assert set(status[real & (scheme == "fp8_ds_mla")]) == {"skipped"}  # needs 512 columns
        ok = real & (status == "ok")
        assert (rel[ok & (scheme == "bf16")] < 2 ** -8).all()
        assert (rel[ok & (scheme == "mxfp4")] > rel[ok & (scheme == "fp8_e4m3_pt")].max()).all()
        assert set(layers[ok & (scheme != "bf16")]) == {2} and set(layers[ok & (scheme == "bf16")]) == {1}
    figs = tmp_path / "figs"
    from analysis.figures import model as model_figures
    assert model_figures.main([str(out), "--out", str(figs)]) == 0
    for name in ("model_quality_pareto", "model_quality_vs_decode", "real_kv_error_per_layer",
                 "real_k_channels"):
        assert os.path.exists(figs / f"{name}.png"), name


def test_bad_input_exits_2(run, tiny_model, tmp_path):
    for body, needle in [
        ("[q]\nkind = model_quality\nmodel = /nonexistent.h5\n", "does not exist"),
        ("[q]\nkind = model_quality\nmodel = MODEL\ntext = nope\n", "no text 'nope'"),
        ("[q]\nkind = model_quality\nmodel = MODEL\ntext = a\ncontext = 100000\n", "tokens"),
        ("[q]\nkind = model_quality\nmodel = MODEL\ntext = a\ncontext = 64\nbf16_layers = 7\n", "not a layer"),
        ("[r]\nkind = real_kv_error\nmodel = MODEL\ntext = a\ntokens = 64\nlayer = 5\n", "layer 5"),
    ]:
        cfg = tmp_path / "bad.ini"
        cfg.write_text(ini(tiny_model, body))
        out = tmp_path / "bad.h5"
        r = run("sweep", cfg, "--out", out, "--progress", "none")
        assert r.returncode == 2, (body, r.stdout, r.stderr)
        assert needle in r.stderr, (needle, r.stderr)
        assert not out.exists()
