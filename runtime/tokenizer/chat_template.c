/* chat_template.c: the chat prompt for one (system?, user) turn, ending with the assistant
 * header. We do not run Jinja: the template text from the model file is matched to a known
 * family, and that family's rendering (checked against jinja2 by the golden test) is
 * written directly. Families (all ChatML: <|im_start|>role\ncontent<|im_end|>\n):
 *   qwen2.5  always a system turn; default "You are Qwen, created by Alibaba Cloud. ..."
 *   smollm2  system turn; default "You are a helpful AI assistant named SmolLM, ..."
 *   chatml   the plain HF ChatML template: no system turn unless one is given */
#include "tokenizer_internal.h"
#include "common/util.h"
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

char *skv_chat_prompt(const skv_tokenizer *t, const char *system, const char *user) {
    if (!t || !user) { skv_error("chat template: NULL argument"); return NULL; }
    if (!t->chat_template) { skv_error("chat template: the model file has none"); return NULL; }
    const char *sys;
    if (strcmp(t->chat_template, CHATML_PLAIN) == 0) {
        sys = system;
    } else {
        const chat_family *fam = detect(t->chat_template);
        if (!fam) {
            skv_error("chat template: unknown template (%.60s...); supported: Qwen2.5, SmolLM2, plain ChatML",
                      t->chat_template);
            return NULL;
        }
        sys = system ? system : fam->default_system;
    }
    static const char S0[] = "<|im_start|>system\n", U0[] = "<|im_start|>user\n",
                      E[] = "<|im_end|>\n", A[] = "<|im_start|>assistant\n";
    size_t n = strlen(U0) + strlen(user) + strlen(E) + strlen(A) + 1;
    if (sys) n += strlen(S0) + strlen(sys) + strlen(E);
    char *out = skv_malloc(n, "chat prompt");
    if (!out) return NULL;
    if (sys) snprintf(out, n, "%s%s%s%s%s%s%s", S0, sys, E, U0, user, E, A);
    else snprintf(out, n, "%s%s%s%s", U0, user, E, A);
    return out;
}
