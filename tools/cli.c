/* See cli.h. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *tool = "ffpa";

void cli_tool(const char *name)
{
    tool = name;
}

void cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(CLI_EXIT_USAGE);
}

void cli_bad_option(char **argv, void (*usage)(FILE *))
{
    fprintf(stderr, "%s: unknown option or missing value: '%s'\n", tool, argv[optind - 1]);
    usage(stderr);
    exit(CLI_EXIT_USAGE);
}

int64_t cli_int(const char *flag, const char *text, int64_t lo, int64_t hi)
{
    char *end = NULL;
    errno = 0;
    long long v = text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || *end || errno == ERANGE || v < lo || v > hi)
        cli_usage_error("%s '%s': expected an integer in [%lld, %lld]", flag, text ? text : "",
                        (long long)lo, (long long)hi);
    return (int64_t)v;
}

double cli_real(const char *flag, const char *text, double lo, double hi)
{
    char *end = NULL;
    errno = 0;
    double v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi)
        cli_usage_error("%s '%s': expected a number in [%g, %g]", flag, text ? text : "", lo, hi);
    return v;
}

int cli_choice(const char *flag, const char *text, const char *const *names, int n)
{
    for (int i = 0; i < n; ++i)
        if (text && !strcmp(text, names[i]))
            return i;
    char list[256] = "";
    for (int i = 0; i < n; ++i)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? (i + 1 < n ? ", " : " or ") : "",
                 names[i]);
    cli_usage_error("%s '%s': expected %s", flag, text ? text : "", list);
}

FILE *cli_open_out(const char *flag, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        cli_usage_error("%s '%s': cannot create the file: %s", flag, path, strerror(errno));
    return f;
}

int cli_close_out(FILE *f, const char *path)
{
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "%s: writing '%s' failed: %s\n", tool, path, strerror(errno));
        return 1;
    }
    return 0;
}
