//! peakplan-chart: the stacked-bar memory chart.
