# Tests of base/ (the floor): the fatal report every CUDA/cuDNN/cuBLAS/NCCL
# check ends in.
tower_add_test(NAME test_base_check SOURCES test_base_check.c LIBS tower_base Threads::Threads)
