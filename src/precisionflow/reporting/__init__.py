"""Verdicts and records: budgets and verdicts (budget, stats), engine-vs-reference comparisons (compare),
the report page's pieces (report_pages), MLflow (tracking, mlflow_compare)."""
