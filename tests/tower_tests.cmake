# Tests of tower/ (the towers and the step hand-off) and of the whole step.
tower_add_test(NAME test_tower_equivalence SOURCES test_tower_equivalence.c LIBS tower_train)
tower_add_test(NAME test_accum_steps SOURCES test_accum_steps.c LIBS tower_train)
