"""Figure 4 draws the quantity the README's tables report: MSE = tr Cov + bias^2 when the run saved it."""

from grpo_mse.figures.tracecov import draw_mse_panel, panel_curves, plt

RUN = {
    "K_list": [2, 4],
    "conditional_on_x": {"naive": [10.0, 5.0], "grpo": [30.0, 12.0], "oracleV": [20.0, 11.0]},
    "ci95": {"naive": [1.0, 1.0], "grpo": [2.0, 2.0], "oracleV": [2.0, 2.0]},
    "mse": {"naive": [14.0, 6.0], "grpo": [30.0, 12.0], "oracleV": [20.0, 11.0]},
    "mse_ci95": {"naive": [1.5, 1.1], "grpo": [2.0, 2.0], "oracleV": [2.0, 2.0]},
}


def test_the_panel_plots_mse_with_vanilla_bias_when_saved():
    curves, half_widths, label = panel_curves(RUN)
    assert curves["naive"] == [14.0, 6.0] and half_widths["naive"] == [1.5, 1.1]
    assert label.startswith("MSE = tr Cov + bias²")
    fig, ax = plt.subplots()
    draw_mse_panel(ax, RUN)
    vanilla = next(c for c in ax.containers if c.get_label() == "vanilla")
    assert list(vanilla.lines[0].get_ydata()) == [14.0, 6.0]
    plt.close(fig)


def test_runs_without_a_complete_mse_fall_back_to_the_trace():
    for broken in ({}, {"mse": {"naive": [1.0]}}, {"mse": {k: v[:1] for k, v in RUN["mse"].items()}}):
        run = {**{k: v for k, v in RUN.items() if k not in ("mse", "mse_ci95")}, **broken}
        curves, half_widths, label = panel_curves(run)
        assert curves is run["conditional_on_x"] and half_widths is run["ci95"]
        assert "bias" not in label
