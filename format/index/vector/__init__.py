"""Vector indices: IVF partitions with flat, PQ and SQ storage, their distances and search."""
