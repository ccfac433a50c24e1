"""The README's nodes table is the nodes' schemas, and stays in step with them."""
from tests import nodes_table


def test_readme_nodes_table_matches_the_schemas():
    block = nodes_table.current_block(nodes_table.README.read_text(encoding="utf-8"))
    assert block == nodes_table.block(), f"README.md's nodes table is stale; run `{nodes_table.COMMAND}`"
    assert block.count("\n| **") == len(nodes_table.schemas())
