"""Experiment code: the scenarios, paper-effect validations and comparisons built on top of the network
engine and the simulator. Nothing in `simroute.network` or `simroute.sim` imports from here."""
