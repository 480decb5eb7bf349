/* flags.h — command-line flags for the `tower` subcommands.
 *
 * Where it sits: base/; the `tower` subcommands (cmd/) and the benchmark
 * programs (bench/) each declare one table of Flag entries whose targets
 * already hold the defaults, so `--help`, the parser and docs/cli.md
 * (checked by a test) read the same table.
 * Accepted forms: --name value, --name=value; booleans also bare --name, or
 * --name true / --name false (the word after it: only those two).
 * Also the one rule of the environment switches (flags_env_on).
 */
#ifndef TOWER_CMD_FLAGS_H
#define TOWER_CMD_FLAGS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FLAG_INT, FLAG_LONG, FLAG_FLOAT, FLAG_DOUBLE, FLAG_BOOL, FLAG_STRING } FlagType;

typedef struct {
    const char *name;  /* without the leading "--" */
    FlagType type;
    void *target;      /* int*, long*, float*, int* (bool), const char** (string) */
    const char *help;
    /* A number flag's accepted values (FLAG_RANGE): lo..hi, each end in or
     * out as `ends` says ("[]", "[)", "(]" or "()"); hi INFINITY: no upper
     * end.  ends NULL: any int, long or finite float. */
    double lo, hi;
    const char *ends;
    const char *range_note; /* what a value in the range means, "0: one per device", or NULL */
} Flag;

/* The range of a number flag, after its help in a table entry:
 *   {"batch_size", FLAG_INT, &o->batch_size, "examples per tower", FLAG_RANGE(1, 1 << 20, "[]", NULL)}
 * flags_parse refuses a value outside it (one line, the range and the
 * note) and --help prints it after the default. */
#define FLAG_RANGE(lo_, hi_, ends_, note_) .lo = (lo_), .hi = (hi_), .ends = (ends_), .range_note = (note_)

/* Parse argv[1..argc-1] against `flags`; argv[0] is the program as the
 * messages name it ("tower train": cmd/main.c passes each subcommand its
 * name so; "bench_model").
 * Arguments that are not flags are collected, in order, into positional
 * (an array of at least argc entries owned by the caller) and counted in
 * *n_positional.  Returns 0 on success, 1 when --help or -h was given (the
 * caller prints the usage), and -1 on a bad flag or value, an argument with
 * one dash, a number that is not finite or outside the flag's range (one
 * line on stderr naming the flag, the value and what the flag accepts). */
int flags_parse(const Flag *flags, int n_flags, int argc, char **argv,
                char **positional, int *n_positional);

/* As flags_parse, and given[k] (n_flags entries, the caller's) 1 for each
 * flag k the command line names, 0 for the others: a check of one flag
 * against another tells a value given from the default (an optimizer's
 * option given with another optimizer).  given NULL: as flags_parse. */
int flags_parse_given(const Flag *flags, int n_flags, int argc, char **argv, char **positional, int *n_positional,
                      unsigned char *given);

/* quiet 1: flags_parse and flags_parse_given write no line (their return
 * values unchanged) until called with 0; for a rank of an MPI job other than
 * the one that says why the job's command line is refused.  Set before any
 * thread starts. */
void flags_quiet(int quiet);

/* 1 when the flag `name` of the table was given (given as flags_parse_given
 * filled it), 0 when not or when the table has no such flag. */
int flags_was_given(const Flag *flags, int n_flags, const unsigned char *given, const char *name);

/* Print "usage: PROGRAM SYNOPSIS" ("usage: tower train [flags]") and every
 * flag with its default and range. */
void flags_print_usage(const char *program, const char *synopsis,
                       const Flag *flags, int n_flags);

/* x as the fewest digits (at most 17) that read back as x: 0.1 for 0.1, not 0.10000000000000001.  As %.6g at
 * the least, so that a whole number under a million has no exponent (350, not 3.5e+02).  Returns buf. */
const char *flags_double_str(double x, char *buf, int n);

/* x as the fewest digits (at most 9) that read back as the same float: 0.1375 for 0.1375f, not 0.137500003, and
 * 0.1374999 for 0.1374999f (0.1375 is another float).  As %.6g at the least, so that a whole number under a
 * million has no exponent (100000, not 1e+05).  Returns buf. */
const char *flags_float_str(float x, char *buf, int n);

/* Format a flag's current value (its default before parsing) into buf. */
const char *flags_value_str(const Flag *flag, char *buf, int buf_n_bytes);

/* Format what a number flag accepts into buf: "an integer in [1, 64]",
 * "an integer >= 0", "a number in [0, 1)", "a number > 0", with the range
 * note in parentheses when there is one; without a range, the type's. */
const char *flags_range_str(const Flag *flag, char *buf, int buf_n_bytes);

/* An environment switch (TOWER_CUDNN_FIND=1 and the like, read where they
 * act): 1 when the environment sets `name` to anything but "" or "0",
 * else 0. */
int flags_env_on(const char *name);

/* A switch that is on by default (TOWER_GPU_OVERLAP): 0 only when the
 * environment sets `name` to "0", else 1 (unset and "" included). */
int flags_env_default_on(const char *name);

#ifdef __cplusplus
}
#endif

#endif
