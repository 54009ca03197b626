"""Which recipe wins, and by how much compute: the effective compute multiplier of one pretraining
recipe over another, from their two scaling ladders (`python -m analysis compare`).

- `ladders`: the inputs (runs tables, sweep directories, a table split by its recipe column) as
  one `Ladder` per recipe, and the checks (two budgets at least, one loss for both);
- `frontiers`: each recipe's best loss at budget C, L*(C) = E + G C^-gamma, and the multiplier
  m(C) between two of them in closed form;
- `methods`: the candidates (joint fits with shared exponents or a shared floor, free per-recipe
  fits, frontier power laws, the "no difference" baseline) and the default the backtest zoo chose;
- `measure`: multipliers measured on the runs alone (what the `compare` backtest scores);
- `comparison`: multipliers at budgets with 90% intervals (joint bootstrap + forward-chaining
  error), the trend d log m / d log C and the crossover; `compare_recipes` is the entry point;
- `result`, `render`: the typed result (`compare --json`), the text table, Markdown and figure.

docs/analysis.md, "Comparing recipes".
"""
