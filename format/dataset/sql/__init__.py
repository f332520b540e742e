"""SQL over datasets: a dataset version as a table DataFusion scans (`table`, with top-k
reads, `topk`, and the limits and sorts a plan lets it push down, `pushdown`), and
pylance's `LanceDataset.sql` (`query`)."""
