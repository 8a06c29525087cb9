"""Mutants of issue 46's parametrize columns of tuples, lists and enum members held on the host.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py params2 ["name" ...]
"""

T = "tests/test_param_columns.py::"
HOST = T + "test_tuple_list_and_enum_columns_leave_the_graded_copy"
GRADED = T + "test_tuple_and_enum_expectations_are_graded_as_the_original[unshare]"
PARAMS = "tandem/envs/coding/params.py"

PARAMS2 = [
    ("a container's case id (argname + index) not computed", PARAMS,
     'parts.append(f"{name}{index}")  # pytest', "return None  # pytest", HOST),
    ("an enum member in a row not folded", PARAMS,
     "return EnumMember(node.value.id, node.attr) if plain else members[node.attr]",
     'raise NotConstant("an attribute")', HOST),
    ("an IntEnum member held as a plain Enum member", "tandem/envs/coding/enum_value.py",
     "return (kind is None, members) if members else None", "return (True, members) if members else None", HOST),
    ("an enum member as an input taken out of the graded copy", PARAMS,
     "if members - set(columns):", "if False:", HOST),
    ("a plain Enum member opaque in the sandbox", "tandem/envs/coding/grader_plugin/tandem_checks.py",
     "        if member is not None:\n            return member\n", "", GRADED),
    ("a plain Enum member judged by its value", "tandem/envs/coding/grader_plugin/tandem_checks.py",
     'return {"e": [str(kind.__name__), name]} if type(name) is str else None',
     "return encode(value.value)", GRADED),
]
