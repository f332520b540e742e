"""Lance indices: reading the index files pylance writes, and using them to answer queries.

Vector indices (IVF_FLAT, IVF_PQ, IVF_SQ) answer nearest-neighbour searches; scalar indices
(BTREE, BITMAP) prune the fragments and rows a filter has to read. This layer sits between
the files and the dataset: it reads index files with format.file and is used by format.dataset.
"""
