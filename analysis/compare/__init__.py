"""Which recipe wins, and by how much compute: the effective compute multiplier of one pretraining
recipe over another, from their two scaling ladders (`python -m analysis compare`).

- `ladders`: the inputs as one `Ladder` per recipe, and the checks;
- `frontiers`: each recipe's best loss L*(C) = E + G C^-gamma and the multiplier m(C) between two;
- `fits`: the methods (`CompareMethod`) fitted to two ladders; `methods` registers them;
- `measure`: multipliers measured on the runs alone (what the `compare` backtest scores);
- `comparison`: multipliers at budgets with 90% intervals, the trend and the crossover
  (`compare_recipes` is the entry point); `result`, `render`, `section`: the typed result, the
  text, Markdown and figure, and the report's "Recipes" section.

docs/compare.md, "Comparing recipes".
"""
