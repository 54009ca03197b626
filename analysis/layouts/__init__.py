"""Layouts as rows of a table, and the cost model calibrated on measured ones (`layout-eval`,
`plan --calibrate`).

- `rows`: a layout CSV's rows -> (ModelShape, Layout, Hardware or MixedCluster) per row, and the
  cost model's predictions of each (`pred_*` columns);
- `calibration`: a framework's efficiency profile refitted to measured rows (MEASURED.csv) or to
  a trainer sweep's runs, with its leave-one-out MFU interval (`Calibration`).
"""
