"""analysis.step_figures: the crossover fit on synthetic roofline curves, and the figure hook."""
import math

import numpy as np

from analysis import figures, step_figures


def roofline(batch, t0, per_row):
    return np.maximum(t0, per_row * np.asarray(batch, dtype=float))


def test_knee_of_an_exact_roofline():
    b = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    knee, t0, s = step_figures.measured_crossover(b, roofline(b, 100.0, 0.5))
    assert t0 == 100.0 and s == 0.5
    assert knee == 200.0


def test_knee_tolerates_noise_and_a_soft_corner():
    rng = np.random.default_rng(8)
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048])
    t = np.sqrt(100.0**2 + (0.5 * b) ** 2) * (1 + 0.01 * rng.standard_normal(b.size))
    knee, _, _ = step_figures.measured_crossover(b, t)
    assert 170 < knee < 230


def test_no_knee_without_both_segments():
    assert math.isnan(step_figures.measured_crossover([16, 32, 64], [1, 2, 3])[0])
    assert math.isnan(step_figures.measured_crossover([1, 2, 4, 256], [1, 1, 1, 2])[0])


def test_an_outlier_batch_does_not_move_the_knee():
    b = [1, 2, 4, 8, 512, 768, 1024, 1536, 2048]
    t = roofline(b, 100.0, 0.5)
    t[5] *= 3  # a slow kernel choice at one batch size
    assert step_figures.measured_crossover(b, t)[0] == 200.0


def test_the_standard_figure_list_has_the_step_figures():
    names = [n for n, _ in figures.FIGURES]
    assert "decode_step_time_vs_batch" in names and "decode_step_gemm_crossover" in names
