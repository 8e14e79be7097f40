"""Model layer: resolving and loading base models (Hub ids, local folders, the built-in tiny model)."""
