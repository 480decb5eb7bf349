# Tests of tower/ (the towers and the step hand-off) and of the whole step.
tower_add_test(NAME test_tower_equivalence SOURCES test_tower_equivalence.c LIBS tower_train)
# Sync batch norm at the towers: N towers of B equal one tower of N x B.
tower_add_test(NAME test_tower_sync_bn SOURCES test_tower_sync_bn.c LIBS tower_train)
