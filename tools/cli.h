/*
 * Command-line parsing shared by ffpa-run, ffpa-bench and ffpa-tune. Every
 * number is parsed whole (end-checked strtoll / strtod) and range-checked;
 * a bad value prints "<tool>: <flag> '<text>': expected ..." on stderr and
 * exits with status 2, the tools' usage error. Exit statuses of the tools:
 * 0 success, 1 a run or check failed, 2 bad usage.
 */
#ifndef FFPA_TOOLS_CLI_H
#define FFPA_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2 };

/* Names the tool in messages ("ffpa-run"). */
void cli_tool(const char *name);

/* Prints "<tool>: <message>" on stderr and exits with CLI_EXIT_USAGE. */
void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* getopt_long returned '?': names the unknown option (or the one missing
 * its value), prints the usage on stderr, exits with CLI_EXIT_USAGE. */
void cli_bad_option(char **argv, void (*usage)(FILE *)) __attribute__((noreturn));

/* The integer text holds, in [lo, hi]. */
int64_t cli_int(const char *flag, const char *text, int64_t lo, int64_t hi);

/* The finite real number text holds, in [lo, hi]. */
double cli_real(const char *flag, const char *text, double lo, double hi);

/* Index of text in names[0..n). */
int cli_choice(const char *flag, const char *text, const char *const *names, int n);

/* An output file opened for writing; a usage error naming the flag when it
 * cannot be created (missing folder, no permission). */
FILE *cli_open_out(const char *flag, const char *path);

/* Closes a file written by the tool; 0, or 1 after a message when a write
 * or the close failed (disk full). */
int cli_close_out(FILE *f, const char *path);

#endif
