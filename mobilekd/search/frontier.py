"""The search's picture: every trial's validation score against its Pixel 4 estimate, by family, the budget as a
line and the chosen student marked; pruned trials hollow (their score is the last evaluation they reached); the
best constant answer's score on the same validation split as a dotted line (a constant costs nothing on a phone,
so a trial below it is dominated)."""

from __future__ import annotations

from pathlib import Path

from mobilekd.fileio import save_png

MARKERS = {"subset": "o", "tinybert": "s", "mobilebert": "D", "bilstm": "^"}


def draw(ax, rows: list[dict], budget_ms: float, metric: str, title: str = "", constant: dict | None = None) -> None:
    """Every trial of `rows` (ship.json's "trials") on `ax`: validation score against Pixel 4 estimate; `constant`:
    the best constant answer on validation (ship.json's `constant`)."""
    scored = [r for r in rows if r["val_value"] is not None and r["pixel4_ms_est"] is not None]
    for i, family in enumerate(sorted({r["family"] for r in scored})):
        color = f"C{i}"
        for state, face in (("complete", color), ("pruned", "none")):
            rs = [r for r in scored if r["family"] == family and r["state"] == state]
            if rs:
                ax.scatter([r["pixel4_ms_est"] for r in rs], [r["val_value"] for r in rs], marker=MARKERS.get(family, "o"),
                           facecolors=face, edgecolors=color, label=f"{family} ({state})")
    for r in scored:
        if r["chosen"]:
            ax.scatter([r["pixel4_ms_est"]], [r["val_value"]], marker="*", s=260, color="gold", edgecolors="black",
                       zorder=5, label=f"chosen: trial {r['trial']}")
    ax.axvline(budget_ms, color="grey", linestyle="--", label=f"budget {budget_ms:.1f} ms")
    if constant:
        said = f"always {constant['label']!r}" if constant.get("label") else "the best constant answer"
        values = [r["val_value"] for r in scored]
        if values and constant["value"] < min(values) - (max(values) - min(values)):  # far below: named, not drawn
            ax.text(0.02, 0.02, f"{said}: {constant['value']:.4f} (below the axis)", transform=ax.transAxes,
                    fontsize=7)
        else:
            ax.axhline(constant["value"], color="black", linestyle=":", label=said)
    ax.set_xlabel("Pixel 4 latency, ms (ESTIMATE, cost model)")
    ax.set_ylabel(f"validation {metric} (a split of train)")
    ax.set_title(title or "ship's search: every trial")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)


def plot(rows: list[dict], budget_ms: float, metric: str, path: Path, title: str = "",
         constant: dict | None = None) -> None:
    """OUT/frontier.png: `draw` on a figure of its own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    draw(ax, rows, budget_ms, metric, title, constant)
    save_png(fig, path)
