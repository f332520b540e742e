"""INVERTED (full-text) indices as pylance 14 writes them: the analyzer (`analyzer`, with
its ASCII folding table in `folding`), token dictionaries (`fst`), posting blocks
(`postings`), reading a segment (`index`) and building one (`build`)."""
