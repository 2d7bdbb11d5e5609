"""Polling: the pollers read the sources, turn their results into facts (`collect`), ask the verdict,
keep the history and publish the documents. Only this layer and the command line read the sources."""
