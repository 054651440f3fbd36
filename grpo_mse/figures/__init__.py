"""Figures drawn from saved results only (Figure 4 and its panels, Figure 5, Table 2)."""
