"""The HTML report: figures (matplotlib, PNG), tables (CSV) and one self-contained index.html.

``build.build_report`` runs the analysis and the simulator and writes everything; ``figures``
and ``heatmaps`` draw, ``html`` renders, ``answer`` picks the headline. matplotlib is imported
by the drawing modules only.
"""
