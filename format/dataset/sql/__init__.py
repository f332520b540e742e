"""SQL over datasets: a dataset version as a table DataFusion scans (`table`, with top-k
reads, `topk`), and pylance's `LanceDataset.sql` (`query`)."""
