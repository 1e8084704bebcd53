"""Static (AST-only) detection of graph-mode hazards in LLM model code for Ascend NPU."""

from .analyzer import Hazard, analyze_source
from .report import render
from .rules import RULES, Rule
from .runner import CheckResult, check_paths

__all__ = ["RULES", "CheckResult", "Hazard", "Rule", "analyze_source", "check_paths", "render"]
