"""Table-level structures: schema, manifests, fragments, deletion files, row ids."""
