/* chat_template.c: the chat prompt for one (system?, user) turn, ending with the assistant
 * header. We do not run Jinja: the template text from the model file is matched to a known
 * family, and that family's rendering (checked against jinja2 by the golden test) is
 * written directly. Families (all ChatML: <|im_start|>role\ncontent<|im_end|>\n):
 *   qwen2.5  always a system turn; default "You are Qwen, created by Alibaba Cloud. ..."
 *   smollm2  system turn; default "You are a helpful AI assistant named SmolLM, ..."
 *   chatml   the plain HF ChatML template: no system turn unless one is given
 * A whole conversation (skv_chat_render) is each message in turn, the family's default
 * system turn first when the first message is not a system one. */
#include "tokenizer_internal.h"
#include "common/util.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *family;
    const char *marker;          /* substring that identifies the template (SmolLM2's has real
                                    newlines inside its Jinja strings, Qwen's has \n escapes) */
    const char *default_system;  /* NULL: no system turn unless given */
} chat_family;

static const char CHATML_PLAIN[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const chat_family FAMILIES[] = {
    { "qwen2.5", "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}",
      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." },
    { "smollm2", "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}",
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face" },
};

static const chat_family *detect(const char *tmpl) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strstr(tmpl, FAMILIES[i].marker) &&
            (strstr(tmpl, "'<|im_start|>assistant\\n'") || strstr(tmpl, "'<|im_start|>assistant\n'")))
            return &FAMILIES[i];
    return NULL;
}

/* which system message a conversation gets: given, the family's default, or none;
 * -1 + error for an unknown template */
static int family_system(const skv_tokenizer *t, const char **def) {
    *def = NULL;
    if (!t->chat_template) return skv_error("chat template: the model file has none");
    if (strcmp(t->chat_template, CHATML_PLAIN) == 0) return 0;
    const chat_family *fam = detect(t->chat_template);
    if (!fam)
        return skv_error("chat template: unknown template (%.60s...); supported: Qwen2.5, SmolLM2, plain ChatML",
                         t->chat_template);
    *def = fam->default_system;
    return 0;
}

static int role_ok(const char *r) {
    return r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant"));
}

char *skv_chat_render(const skv_tokenizer *t, const char *const *roles, const char *const *contents, int n) {
    if (!t || n < 1 || !roles || !contents) { skv_error("chat template: no messages"); return NULL; }
    const char *def;
    if (family_system(t, &def)) return NULL;
    for (int i = 0; i < n; i++) {
        if (!role_ok(roles[i])) {
            skv_error("chat template: message %d has role '%s' (system, user or assistant)", i, roles[i] ? roles[i] : "(none)");
            return NULL;
        }
        if (!contents[i]) { skv_error("chat template: message %d has no content", i); return NULL; }
    }
    static const char S0[] = "<|im_start|>", E[] = "<|im_end|>\n", A[] = "<|im_start|>assistant\n";
    const bool add_sys = def && strcmp(roles[0], "system") != 0;
    size_t len = strlen(A) + 1 + (add_sys ? strlen(S0) + 7 + strlen(def) + strlen(E) : 0);
    for (int i = 0; i < n; i++) len += strlen(S0) + strlen(roles[i]) + 1 + strlen(contents[i]) + strlen(E);
    char *out = skv_malloc(len, "chat prompt");
    if (!out) return NULL;
    size_t o = 0;
    if (add_sys) o += (size_t)snprintf(out + o, len - o, "%ssystem\n%s%s", S0, def, E);
    for (int i = 0; i < n; i++) o += (size_t)snprintf(out + o, len - o, "%s%s\n%s%s", S0, roles[i], contents[i], E);
    snprintf(out + o, len - o, "%s", A);
    return out;
}

char *skv_chat_prompt(const skv_tokenizer *t, const char *system, const char *user) {
    if (!t || !user) { skv_error("chat template: NULL argument"); return NULL; }
    const char *def;
    if (family_system(t, &def)) return NULL;
    const char *sys = system ? system : def;
    const char *roles[2] = { "system", "user" }, *contents[2] = { sys, user };
    return sys ? skv_chat_render(t, roles, contents, 2) : skv_chat_render(t, roles + 1, contents + 1, 1);
}
