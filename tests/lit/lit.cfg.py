# lit configuration of mimo's FileCheck tests.
import os

import lit.formats

config.name = "mimo"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mimo_binary_dir, "tests", "lit")

# Our tools first, then FileCheck, not and split-file from LLVM 19.
config.environment["PATH"] = os.pathsep.join(
    [config.mimo_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%examples", os.path.join(config.mimo_source_dir, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
