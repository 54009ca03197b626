"""`sweep.recipes: {name: [overrides]}`: one ladder per recipe, the sweep's plan run once per recipe.

Each recipe is a name and the Hydra overrides that make it (`optim.schedule=wsd`,
`optim.warmup_fraction=0.1`, `data.path=...`). The sweeper (hydra_plugins/scalelab_sweeps)
plans the preset's runs once per recipe with the recipe's overrides on top of the base config,
so every ladder is the one its own config plans (a recipe that changes the batch or the model
changes its runs' lengths too), and WSD branches and packs form within a recipe. Every run gets
`sweep.recipe=<name>` (the runs table's `sweep.recipe` column: `python -m analysis compare
SWEEP --by recipe`, and the report's "Recipes" section) and its label ends in `_<name>`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from experiments.sweeps.ladder import LadderError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RECIPE_KEY = "sweep.recipe"


class RecipeError(LadderError):
    """A bad `sweep.recipes` (the message names the key)."""


def recipe_overrides(recipes: Any) -> list[tuple[str, list[str]]]:
    """[(name, overrides)] of `sweep.recipes`, in its order: the overrides the recipe's runs get
    (its own, then `sweep.recipe=<name>` and `sweep.recipes=null`, so a run's config, and its run
    id, holds its recipe's name and not the whole mapping)."""
    if not isinstance(recipes, Mapping) or not recipes:
        raise RecipeError(
            "sweep.recipes must map recipe names to lists of overrides, e.g. "
            "'sweep.recipes={cosine:[optim.schedule=cosine],wsd:[optim.schedule=wsd]}'"
        )
    if len(recipes) < 2:
        raise RecipeError(
            f"sweep.recipes has {len(recipes)} recipe ({', '.join(map(str, recipes))}); compare two or more"
        )
    out = []
    for name, ovs in recipes.items():
        name = str(name)
        if not NAME.match(name):
            raise RecipeError(f"sweep.recipes: recipe name {name!r} must be letters, digits, '_', '.' or '-'")
        if ovs is None:
            ovs = []
        if isinstance(ovs, str) or not all(isinstance(o, str) and "=" in o for o in ovs):
            raise RecipeError(f"sweep.recipes.{name} must be a list of overrides KEY=VALUE (got {ovs!r})")
        bad = [o for o in ovs if o.lstrip("+~").startswith(("sweep.recipe", "hydra."))]
        if bad:
            raise RecipeError(f"sweep.recipes.{name}: {bad[0]!r}: a recipe sets its runs' config, not this")
        out.append((name, [*ovs, f"++{RECIPE_KEY}={name}", "sweep.recipes=null"]))
    return out


def recipe_label(label: str, recipe: str | None) -> str:
    """A run's label within its recipe (`C1e11_L2-d16` -> `C1e11_L2-d16_cosine`)."""
    return f"{label}_{recipe}" if recipe else label
