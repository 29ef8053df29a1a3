/* policies.c: `smallkv policies [--markdown]`: every KV-cache policy with its options, as the
 * text that ends `smallkv generate --help` (smallkv_policies_help), or as the user page
 * docs/policies.md (smallkv_policies_markdown), both generated from the policies' tables. */
#include "cli.h"
#include "include/smallkv.h"
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *POLICIES_USAGE =
    "usage: smallkv policies [--markdown]\n"
    "List every KV-cache policy: its summary, what it needs, and its options (the list that\n"
    "'smallkv generate --help' ends with). A policy is chosen by a spec NAME[:OPTION=VALUE...],\n"
    "the same in 'generate --policy', 'eval --policies' and the C API.\n"
    "  --markdown   the user page instead: what each policy keeps, its memory tiers, when to\n"
    "               choose it, and a table of its options (docs/policies.md is this output)\n"
    "Exit status: 0 ok, 1 error (one line on stderr), 2 bad usage.\n";

int cmd_policies(int argc, char **argv) {
    bool markdown = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { fputs(POLICIES_USAGE, stdout); return CLI_OK; }
        if (!strcmp(argv[i], "--markdown")) markdown = true;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(POLICIES_USAGE, "policies: unknown option '%s'", argv[i]);
        else return cli_usage_error(POLICIES_USAGE, "policies: unexpected argument '%s'", argv[i]);
    }
    const char *text = markdown ? smallkv_policies_markdown() : smallkv_policies_help();
    if (!text) return cli_fail(NULL);
    if (fputs(text, stdout) == EOF || fflush(stdout)) {
        fprintf(stderr, "smallkv: policies: cannot write the output\n");
        return CLI_ERR;
    }
    return CLI_OK;
}
