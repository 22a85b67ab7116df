"""Calibration to a user's own measured runs (`shardwise calibrate`) and the error bars of every
prediction: `parameters` (what is fitted and how it changes a cluster), `runs` (reading measured
runs), `fit` (the fit and the intervals), `store` (the calibration file)."""
