"""What `make placement-quality` prints (benchmarks/quality.py measures): a row per
case and per trap, the GPUs placed, the cost against the least, the overcommits, and
the headline ratios; percentages of the solver's optimum or of the in-order optimum."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks import corpus, solver


def ratio(placed: int, optimal: int) -> float:
    return 1.0 if optimal == 0 else placed / optimal


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(rows: Sequence[dict], strategies: Sequence[str]) -> str:
    lines = ["per case (replicas placed once settled, and on first reconciles; "
             "% of the solver's optimum)"]
    cols = ["case", "asked", "optimal", "in order", "node-wise"] + [
        c for s in strategies for c in (s, f"{s} %", f"{s} first", f"{s} moves")]
    cells = [[r["case"], str(r["asked"]),
              str(r["optimal"]) + ("" if r["bound"] == r["optimal"] else f" (<= {r['bound']})"),
              str(r["in_order"]), str(r["nodewise"])]
             + [c for s in strategies for c in (str(r[s]), pct(ratio(r[s], r["optimal"])),
                                                str(r[f"{s} first"]), str(r[f"{s} moves"]))]
             for r in rows]
    lines += _table(cols, cells)
    lines += ["", "per trap (sums over its cases; worst case)"]
    cols = ["trap", "cases", "optimal", "in order"] + [
        c for s in strategies for c in (s, f"{s} %", f"{s} worst", f"{s} loss")]
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        opt = sum(r["optimal"] for r in group)
        cell = [trap, str(len(group)), str(opt), str(sum(r["in_order"] for r in group))]
        for s in strategies:
            got = sum(r[s] for r in group)
            worst = min(ratio(r[s], r["optimal"]) for r in group)
            cell += [str(got), pct(ratio(got, opt)), pct(worst), str(opt - got)]
        cells.append(cell)
    lines += _table(cols, cells)
    lines += ["", "GPUs placed, share of the fleet's (held ones included): the most replicas "
                  "counted by devices (then the most GPUs) and by whole nodes, and each strategy's"]
    cols = ["trap", "fleet GPUs", "held", "device-wise", "node-wise",
            "node-wise replicas"] + list(strategies)
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        cells.append([trap] + gpu_cells(group, strategies))
    scored = [r for r in rows if r["trap"] not in corpus.IN_ORDER]
    cells.append([_corpus(rows)] + gpu_cells(scored, strategies))
    lines += _table(cols, cells)
    lines += ["", "cost per hour of the replicas placed (unpriced pools' nodes apart), against "
                  "the least cost of placing the same replicas; the optimum's: of placing the most"]
    cols = ["trap", "optimum's"] + [c for s in strategies
                                    for c in (f"{s} cost", f"{s} least", f"{s} over")]
    cells = []
    for trap in dict.fromkeys(r["trap"] for r in rows):
        group = [r for r in rows if r["trap"] == trap]
        cell = [trap, str(sum_costs(r["optimal cost"] for r in group))]
        for s in strategies:
            got, least = sum_costs(r[f"{s} cost"] for r in group), sum_costs(r[f"{s} least"] for r in group)
            cell += [str(got), str(least), excess(got, least)]
        cells.append(cell)
    lines += _table(cols, cells)
    unproven = [r["case"] for r in rows if r["bound"] != r["optimal"]]
    over = [o for r in rows for o in r["overcommits"]]
    lines += ["", f"solver: {len(rows) - len(unproven)}/{len(rows)} optima proven"
              + (f" (not proven: {', '.join(unproven)}; the ratio uses the best found)"
                 if unproven else ""),
              f"overcommits: {len(over)}" + (" (" + "; ".join(over[:10]) + ")" if over else "")]
    deployments = sum(r["deployments"] for r in rows)
    lines.append(f"short at arrival (replicas a deployment could have had when it arrived, over "
                 f"{deployments} deployments): " + ", ".join(
                     f"{s} {sum(r[f'{s} short'] for r in rows)}" for s in strategies)
                 + "; the rest of the loss is placements that fitted everything then and "
                   "left a later deployment short")
    for what, cost_key, least_key in (
            ("the least cost of placing the same replicas", "cost", "least"),
            ("each deployment's least on the fleet as it arrived", "arrival cost",
             "arrival least")):
        lines.append(f"cost per hour, against {what}: " + ", ".join(
            f"{s} {sum_costs(r[f'{s} {cost_key}'] for r in rows)} for "
            f"{sum_costs(r[f'{s} {least_key}'] for r in rows)}, "
            + excess(sum_costs(r[f"{s} {cost_key}"] for r in rows),
                     sum_costs(r[f"{s} {least_key}"] for r in rows))
            for s in strategies))
    opt, first_come = sum(r["optimal"] for r in scored), sum(r["in_order"] for r in scored)
    lines.append(f"in order (first come, first served, knowing what comes next), "
                 f"{_corpus(rows)}: {first_come}/{opt} of the optimum "
                 f"({sum(1 for r in scored if r['in_order'] < r['optimal'])} cases below it); "
                 + ", ".join(f"{s} {pct(ratio(sum(r[s] for r in scored), first_come))} of it"
                             for s in strategies))
    lines.append(f"on first reconciles only (each deployment once, as it arrives; nothing "
                 f"settled), {_corpus(rows)}: " + ", ".join(
                     f"{s} {sum(r[f'{s} first'] for r in scored)}/{opt} = "
                     f"{pct(ratio(sum(r[f'{s} first'] for r in scored), opt))}"
                     for s in strategies))
    lines.append("settling (every deployment reconciled again until a round changes nothing): "
                 + ", ".join(f"{s} moved {sum(r[f'{s} moves'] for r in rows)} replicas, "
                             f"at most {max(r[f'{s} rounds'] for r in rows)} rounds"
                             for s in strategies))
    fleet = sum(r["gpus fleet"] for r in scored)
    lines.append(f"GPUs placed, of the fleet's {fleet} ({_corpus(rows)}): device accounting "
                 f"{pct(ratio(sum(r['gpus optimal'] for r in scored), fleet))} at the optimum, "
                 f"whole-node accounting "
                 f"{pct(ratio(sum(r['gpus nodewise'] for r in scored), fleet))}; "
                 + ", ".join(f"{s} {pct(ratio(sum(r[f'{s} gpus'] for r in scored), fleet))}"
                             for s in strategies))
    apart = [r for r in rows if r["trap"] in corpus.IN_ORDER]
    if apart:
        lines.append(f"{', '.join(sorted(corpus.IN_ORDER))} (asks for more than the fleet "
                     f"has; scored apart, against the in-order optimum): "
                     + "; ".join(f"{s} " + headline(apart, s, "in_order") for s in strategies)
                     + " (the in-order optimum bounds no count: a strategy that gives an "
                       "early deployment fewer may place more in all)")
    for s in strategies:
        lines.append(f"{s}: " + headline(scored, s, "optimal"))
    return "\n".join(lines)


def _corpus(rows: Sequence[dict]) -> str:
    """The name of the rows the headline scores."""
    apart = sorted({r["trap"] for r in rows} & corpus.IN_ORDER)
    return "corpus" + (f" without {', '.join(apart)}" if apart else "")


def headline(rows: Sequence[dict], s: str, against: str) -> str:
    """Strategy `s`'s replicas over `rows` against their `against` optimum
    ("optimal" or "in_order"), with the worst case and the cases below 90%."""
    got, opt = sum(r[s] for r in rows), sum(r[against] for r in rows)
    worst = min(rows, key=lambda r: ratio(r[s], r[against]))
    below = sum(1 for r in rows if ratio(r[s], r[against]) < 0.9)
    return (f"{got}/{opt} replicas of the {'optimum' if against == 'optimal' else 'in-order optimum'}"
            f" over {len(rows)} cases = {pct(ratio(got, opt))} (worst case {worst['case']} "
            f"{pct(ratio(worst[s], worst[against]))}, {below} cases < 90%)")


def gpu_cells(group: Sequence[dict], strategies: Sequence[str]) -> list[str]:
    """A row of the GPU table: the fleet's GPUs, and the share each placement got."""
    fleet = sum(r["gpus fleet"] for r in group)
    return [str(fleet), pct(ratio(sum(r["gpus held"] for r in group), fleet)),
            pct(ratio(sum(r["gpus optimal"] for r in group), fleet)),
            pct(ratio(sum(r["gpus nodewise"] for r in group), fleet)),
            str(sum(r["nodewise"] for r in group))] + [
        pct(ratio(sum(r[f"{s} gpus"] for r in group), fleet)) for s in strategies]


def sum_costs(costs) -> solver.Cost:
    total = solver.Cost()
    for c in costs:
        total = solver.Cost(total.unpriced_nodes + c.unpriced_nodes, total.priced + c.priced)
    return total


def excess(got: solver.Cost, least: solver.Cost) -> str:
    """How much more the priced nodes cost than the least (unpriced ones apart)."""
    if least.priced == 0:
        return "+0.0%" if got.priced == 0 else "n/a"
    return f"{100 * (got.priced - least.priced) / least.priced:+.1f}%"


def _table(cols: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    rows = [list(cols)] + [list(c) for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    return ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
            for r in rows]
