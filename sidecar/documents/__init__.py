"""The documents: their contract (schema 2, `contract`), the files generated from it, the builders
that present facts and the verdict (`document`) and the size bounds on what a process chooses."""
