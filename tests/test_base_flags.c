/* test_base_flags.c — the flag parser's ranges (FLAG_RANGE) and the two
 * rules of the environment switches, flags_env_on and flags_env_default_on
 * (off by default: TOWER_CUDNN_FIND, TOWER_CONV1X1_CUDNN,
 * TOWER_CONV_WGRAD_CUDNN, TOWER_CONV_DGRAD_CUDNN, TOWER_DEPTHWISE_CUDNN,
 * TOWER_CUDA_SYNC_CHECK; on by default: TOWER_GPU_OVERLAP).
 *
 * Where it sits: ctest (CPU).  Ranges: each end of each kind ("[]", "()",
 * open upper ends, none) taken and refused one step past it, an int's range
 * capped at INT_MAX, a long's open, values past the type refused by the
 * flag's range, a float's nonzero values under FLT_MIN refused (decimal
 * and hex alike), a refused value not stored, and flags_range_str's words
 * (the refusal lines themselves: tests/test_cli_refusals.sh).
 * flags_parse_given: the flags a command line names, in each form.
 * flags_quiet: a refusal returns -1 and writes nothing while on, its line
 * again once off (stderr captured in a temporary file).
 * flags_env_on: unset, empty and "0" are off; "1" and any other value are
 * on.  flags_env_default_on: only "0" is off.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/flags.h"
#include "tests/check.h"

#define NAME "TOWER_TEST_BASE_FLAGS_SWITCH"

/* flags_parse of "--NAME VALUE" against one flag: its return code. */
static int parse_one(const Flag *f, const char *value) {
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", f->name);
    char *argv[] = {"test", flag, (char *)value, NULL};
    char *positional[4];
    int n_positional;
    return flags_parse(f, 1, 3, argv, positional, &n_positional);
}

static void check_ranges(void) {
    int i = 7;
    long l = 7;
    float x = 0.5f;
    double y = 0.5;
    const Flag flags[] = {
        {"closed", FLAG_INT, &i, "", FLAG_RANGE(1, 64, "[]", "0: never")},
        {"int_open_top", FLAG_INT, &i, "", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"long_open_top", FLAG_LONG, &l, "", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"long_none", FLAG_LONG, &l, ""},
        {"unit", FLAG_FLOAT, &x, "", FLAG_RANGE(0, 1, "[)", NULL)},
        {"positive", FLAG_FLOAT, &x, "", FLAG_RANGE(0, INFINITY, "()", NULL)},
        {"half", FLAG_FLOAT, &x, "", FLAG_RANGE(0, 16, "(]", NULL)},
        {"int_none", FLAG_INT, &i, ""},
        {"epochs", FLAG_DOUBLE, &y, "", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"beta", FLAG_DOUBLE, &y, "", FLAG_RANGE(0, 1, "[)", NULL)},
    };
    const struct { int flag; const char *value; int rc; } cases[] = {
        {0, "1", 0}, {0, "64", 0}, {0, "0", -1}, {0, "65", -1}, {0, "4294967297", -1}, {0, "-4294967295", -1},
        {0, "1x", -1}, {0, "", -1},
        {1, "0", 0}, {1, "2147483647", 0}, {1, "2147483648", -1}, {1, "-1", -1},
        {2, "9223372036854775807", 0}, {2, "99999999999999999999", -1}, {2, "-1", -1},
        {3, "-9223372036854775807", 0}, {3, "-9223372036854775808", -1},
        {4, "0", 0}, {4, "0.999", 0}, {4, "1", -1}, {4, "-0.001", -1}, {4, "nan", -1}, {4, "-inf", -1},
        {5, "1e-30", 0}, {5, "3e38", 0}, {5, "0", -1}, {5, "1e39", -1}, {5, "inf", -1},
        {5, "1.17549435e-38", 0}, {5, "1e-38", -1}, {5, "0x1p-149", -1}, {5, "1e-50", -1}, {4, "1e-45", -1},
        {4, "-0", 0},
        {6, "16", 0}, {6, "0", -1}, {6, "16.01", -1},
        {7, "2147483647", 0}, {7, "-2147483647", 0}, {7, "2147483648", -1},
        /* Blanks and C's hexadecimal refused for every number; a float32 value that rounds out of the range says so
         * (refused); a double keeps what float32 loses (0.99999999 < 1, 1e-40 > 0), and refuses its own subnormals. */
        {0, " 5", -1}, {0, "5 ", -1}, {5, " 1", -1}, {5, "0x10", -1}, {5, "1e1", 0}, {4, "0.99999999", -1},
        {8, "0.7", 0}, {8, "1e-40", 0}, {8, "1e-320", -1}, {8, "0x1p3", -1}, {8, " 2", -1}, {8, "-1", -1},
        {9, "0.99999999", 0}, {9, "1", -1}, {9, "nan", -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const Flag *f = &flags[cases[k].flag];
        i = 7, l = 7, x = 0.5f, y = 0.5;
        const int rc = parse_one(f, cases[k].value);
        CHECK(rc == cases[k].rc, "--%s '%s': %d, want %d", f->name, cases[k].value, rc, cases[k].rc);
        const int untouched = f->type == FLAG_INT ? i == 7 : f->type == FLAG_LONG ? l == 7 : f->type == FLAG_DOUBLE ? y == 0.5
                                                                                                 : x == 0.5f;
        if (rc != 0) CHECK(untouched, "--%s '%s' refused, yet its value changed", f->name, cases[k].value);
        else CHECK(!untouched, "--%s '%s' taken, yet its value did not change", f->name, cases[k].value);
    }
    const char *const words[] = {
        "an integer in [1, 64] (0: never)", "an integer in [0, 2147483647]", "an integer >= 0",
        "an integer in [-9223372036854775807, 9223372036854775807]", "a number in [0, 1)", "a number > 0",
        "a number in (0, 16]", "an integer in [-2147483647, 2147483647]", "a number >= 0", "a number in [0, 1)"};
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
        char buf[160];
        flags_range_str(&flags[k], buf, sizeof buf);
        CHECK(!strcmp(buf, words[k]), "--%s: \"%s\", want \"%s\"", flags[k].name, buf, words[k]);
    }
    /* A double as the fewest digits that read back: 0.7 as typed, not 0.69999999999999996. */
    char digits[32];
    CHECK(!strcmp(flags_double_str(0.7, digits, sizeof digits), "0.7") &&
              !strcmp(flags_double_str(0.99999999, digits, sizeof digits), "0.99999999") &&
              !strcmp(flags_double_str(1.0 / 3.0, digits, sizeof digits), "0.3333333333333333") &&
              !strcmp(flags_double_str(10.0, digits, sizeof digits), "10") &&
              !strcmp(flags_double_str(350.0, digits, sizeof digits), "350") &&
              !strcmp(flags_double_str(1e-7, digits, sizeof digits), "1e-07"),
          "flags_double_str: %s", digits);
    /* A float as the fewest digits that read back as the same float (export's width_multiplier): 0.1375f as
     * 0.1375, 0.1374999f (another float) as typed, 1/3 in at most 9 significant digits; %.6g's style, so 1e5f is
     * 100000. */
    CHECK(!strcmp(flags_float_str(0.1375f, digits, sizeof digits), "0.1375"), "flags_float_str(0.1375f): %s", digits);
    CHECK(!strcmp(flags_float_str(0.1374999f, digits, sizeof digits), "0.1374999"), "flags_float_str(0.1374999f): %s",
          digits);
    CHECK(!strcmp(flags_float_str(100000.0f, digits, sizeof digits), "100000"), "flags_float_str(1e5f): %s", digits);
    const float third = 1.0f / 3;
    flags_float_str(third, digits, sizeof digits);
    int significant = 0; /* the digits from the first nonzero one, before any exponent */
    for (const char *c = digits; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9' && (significant || *c != '0')) significant++;
    CHECK(strtof(digits, NULL) == third && significant <= 9, "flags_float_str(1.0f / 3): %s (%d significant digits)",
          digits, significant);
}

/* flags_parse_given: which flags the command line named, whatever their value (a default given is given), in
 * each form (--a v, --a=v, a bare boolean, a boolean with its word); the others 0; the table's own order. */
static void check_given(void) {
    int a = 1, b = 0, c = 0, d = 0;
    float e = 0.5f;
    const char *s = "x";
    const Flag f[] = {{"a", FLAG_INT, &a, ""},   {"b", FLAG_BOOL, &b, ""},   {"c", FLAG_BOOL, &c, ""},
                      {"d", FLAG_INT, &d, ""},   {"e", FLAG_FLOAT, &e, ""},  {"s", FLAG_STRING, &s, ""}};
    char *argv[] = {"test", "--a", "1", "pos", "--b", "--c", "false", "--e=0.5", NULL};
    char *positional[9];
    int n_positional;
    unsigned char given[6] = {9, 9, 9, 9, 9, 9};
    CHECK(flags_parse_given(f, 6, 8, argv, positional, &n_positional, given) == 0, "parse");
    const unsigned char want[6] = {1, 1, 1, 0, 1, 0};
    for (int k = 0; k < 6; k++) CHECK(given[k] == want[k], "--%s: given %d, want %d", f[k].name, given[k], want[k]);
    CHECK(n_positional == 1 && !strcmp(positional[0], "pos"), "positional");
    CHECK(flags_was_given(f, 6, given, "e") == 1 && flags_was_given(f, 6, given, "d") == 0 &&
              flags_was_given(f, 6, given, "nope") == 0,
          "flags_was_given");
    CHECK(b == 1 && c == 0 && a == 1, "values");
}

/* Bytes written to stderr by parse_one(f, value) (rc: its return code). */
static long stderr_bytes_of(const Flag *f, const char *value, int *rc) {
    fflush(stderr);
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL, "tmpfile");
    int saved = dup(fileno(stderr));
    CHECK(saved >= 0 && dup2(fileno(tmp), fileno(stderr)) >= 0, "redirect stderr");
    *rc = parse_one(f, value);
    fflush(stderr);
    dup2(saved, fileno(stderr));
    close(saved);
    fseek(tmp, 0, SEEK_END);
    long n = ftell(tmp);
    fclose(tmp);
    return n;
}

static void check_quiet(void) {
    int i = 7, rc;
    const Flag f = {"count", FLAG_INT, &i, "a count", FLAG_RANGE(1, 10, "[]", NULL)};
    flags_quiet(1);
    long n = stderr_bytes_of(&f, "11", &rc);
    flags_quiet(0);
    CHECK(rc == -1 && n == 0, "quiet: rc %d (want -1), %ld bytes on stderr (want 0)", rc, n);
    n = stderr_bytes_of(&f, "11", &rc);
    CHECK(rc == -1 && n > 0, "quiet off again: rc %d (want -1), %ld bytes on stderr (want the line)", rc, n);
    CHECK(i == 7, "a refused value was stored: %d", i);
    printf("flags_quiet: a refusal silent while on, its line once off: ok\n");
}

int main(void) {
    check_ranges();
    check_given();
    check_quiet();
    unsetenv(NAME);
    CHECK(flags_env_on(NAME) == 0, "unset: on");
    CHECK(flags_env_default_on(NAME) == 1, "unset: default_on off");
    const struct { const char *value; int on, default_on; } cases[] = {
        {"", 0, 1}, {"0", 0, 0}, {"1", 1, 1}, {"yes", 1, 1}, {"00", 1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        setenv(NAME, cases[k].value, 1);
        CHECK(flags_env_on(NAME) == cases[k].on, "%s=\"%s\": %d, want %d", NAME, cases[k].value, flags_env_on(NAME),
              cases[k].on);
        CHECK(flags_env_default_on(NAME) == cases[k].default_on, "%s=\"%s\": default_on %d, want %d", NAME,
              cases[k].value, flags_env_default_on(NAME), cases[k].default_on);
    }
    unsetenv(NAME);
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("flag ranges: each end taken, one step past it refused (past the type too), refused values not stored: ok\n");
    printf("flags_parse_given: the flags named, in every form, at their defaults too; the others not: ok\n");
    printf("flags_env_on: unset, \"\" and \"0\" off, any other value on: ok\n");
    printf("flags_env_default_on: \"0\" off, unset and any other value on: ok\n");
    return 0;
}
