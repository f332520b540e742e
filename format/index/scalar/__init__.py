"""Scalar indices pylance writes (BTREE, BITMAP): readers that turn a predicate on one
column into the row ids where it is TRUE, for index-pruned reads."""
