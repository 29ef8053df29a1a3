/* json_constrain.c: JSON mode (response_format {"type": "json_object"}): a pushdown
 * automaton that reads a reply byte by byte and accepts exactly the prefixes of one JSON
 * object (RFC 8259: strings with their escapes and well-formed UTF-8, numbers, true /
 * false / null, arrays and objects nested up to SERVE_JSON_DEPTH), and the vocabulary mask
 * built from it: at each step a token is allowed when all of its bytes keep the automaton
 * alive. Two bounds keep a masked reply from running in place: at most SERVE_JSON_WS
 * whitespace bytes in a row and SERVE_JSON_NUM bytes per number. The engine masks with it
 * and ends the reply when the object closes; the unit tests (tests/test_serve_json.c) drive
 * it alone. No model, no allocation: the state is a small value, copied per candidate. */
#include "serve.h"
#include <string.h>

enum {
    J_BEGIN,       /* before the object: whitespace or '{' */
    J_OBJ_FIRST,   /* after '{': a key or '}' */
    J_OBJ_KEY,     /* after ',' in an object: a key */
    J_COLON,       /* after a key: ':' */
    J_VALUE,       /* a value */
    J_ARR_FIRST,   /* after '[': a value or ']' */
    J_AFTER,       /* after a value: ',' or the container's close */
    J_STRING,      /* inside a string (key or value); sub: 0, 1 after '\\', 2..5 \u digits */
    J_NUMBER,      /* inside a number; sub: N_* */
    J_LITERAL,     /* inside true / false / null; lit, sub: bytes matched */
    J_DONE         /* the object has closed: nothing more */
};
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
static const char *const LITERALS[] = { "true", "false", "null" };

void serve_json_init(serve_json *s) { memset(s, 0, sizeof *s); s->st = J_BEGIN; }

bool serve_json_done(const serve_json *s) { return s->st == J_DONE; }

static bool is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static bool in_array(const serve_json *s) { return s->depth > 0 && (s->stack >> (s->depth - 1)) & 1; }

static bool open_container(serve_json *s, bool array) {
    if (s->depth >= SERVE_JSON_DEPTH) return false;
    if (array) s->stack |= 1ULL << s->depth; else s->stack &= ~(1ULL << s->depth);
    s->depth++;
    s->st = array ? J_ARR_FIRST : J_OBJ_FIRST;
    return true;
}

static void close_container(serve_json *s) {
    s->depth--;
    s->st = s->depth == 0 ? J_DONE : J_AFTER;
}

static void value_ended(serve_json *s) { s->st = J_AFTER; }

/* the first byte of a value */
static bool value_start(serve_json *s, unsigned c) {
    s->sub = 0;
    if (c == '{') return open_container(s, false);
    if (c == '[') return open_container(s, true);
    if (c == '"') { s->st = J_STRING; s->key = 0; return true; }
    if (c == '-' || is_digit(c)) { s->st = J_NUMBER; s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT; s->nlen = 1; return true; }
    for (unsigned k = 0; k < 3; k++)
        if (c == (unsigned char)LITERALS[k][0]) { s->st = J_LITERAL; s->lit = (uint8_t)k; s->sub = 1; return true; }
    return false;
}

/* a byte inside a string */
static bool string_byte(serve_json *s, unsigned c) {
    if (s->u_need) {   /* a UTF-8 continuation byte, in the range RFC 3629 allows here */
        if (c < s->u_lo || c > s->u_hi) return false;
        s->u_need--;
        s->u_lo = 0x80; s->u_hi = 0xBF;
        return true;
    }
    if (s->sub == 1) {   /* after a backslash */
        if (c == 'u') { s->sub = 2; return true; }
        if (!strchr("\"\\/bfnrt", (int)c) || c == 0) return false;
        s->sub = 0;
        return true;
    }
    if (s->sub >= 2) {   /* \uXXXX: no surrogate halves (a lone one is not a character) */
        if (!is_hex(c)) return false;
        if (s->sub == 2) s->hi_d = (c == 'd' || c == 'D');
        if (s->sub == 3 && s->hi_d && !(c >= '0' && c <= '7')) return false;   /* D800..DFFF */
        s->sub = s->sub == 5 ? 0 : s->sub + 1;
        return true;
    }
    if (c == '"') {
        if (s->key) s->st = J_COLON; else value_ended(s);
        return true;
    }
    if (c == '\\') { s->sub = 1; return true; }
    if (c < 0x20) return false;
    if (c < 0x80) return true;
    /* the lead byte of a multi-byte character and its second byte's range */
    s->u_lo = 0x80; s->u_hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) s->u_need = 1;
    else if (c >= 0xE0 && c <= 0xEF) { s->u_need = 2; if (c == 0xE0) s->u_lo = 0xA0; if (c == 0xED) s->u_hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { s->u_need = 3; if (c == 0xF0) s->u_lo = 0x90; if (c == 0xF4) s->u_hi = 0x8F; }
    else return false;
    return true;
}

/* a byte inside a number; *again: the number ended before c, which the caller reads anew */
static bool number_byte(serve_json *s, unsigned c, bool *again) {
    const unsigned n = s->sub;
    uint8_t next = 255;
    if (is_digit(c)) {
        if (n == N_MINUS) next = c == '0' ? N_ZERO : N_INT;
        else if (n == N_INT || n == N_FRAC || n == N_EXP) next = (uint8_t)n;
        else if (n == N_DOT) next = N_FRAC;
        else if (n == N_E || n == N_ESIGN) next = N_EXP;
    } else if (c == '.' && (n == N_ZERO || n == N_INT)) {
        next = N_DOT;
    } else if ((c == 'e' || c == 'E') && (n == N_ZERO || n == N_INT || n == N_FRAC)) {
        next = N_E;
    } else if ((c == '+' || c == '-') && n == N_E) {
        next = N_ESIGN;
    }
    if (next != 255) {
        if (s->nlen >= SERVE_JSON_NUM) return false;
        s->nlen++;
        s->sub = next;
        return true;
    }
    if (n == N_ZERO || n == N_INT || n == N_FRAC || n == N_EXP) {   /* a complete number */
        value_ended(s);
        *again = true;
        return true;
    }
    return false;
}

bool serve_json_feed(serve_json *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned c = (unsigned char)bytes[i];
        bool again;
        do {
            again = false;
            const bool structural = s->st != J_STRING && s->st != J_NUMBER && s->st != J_LITERAL;
            if (structural && is_ws(c)) {
                if (s->st == J_DONE || s->ws >= SERVE_JSON_WS) return false;
                s->ws++;
                break;
            }
            s->ws = 0;
            switch (s->st) {
            case J_BEGIN:
                if (c != '{') return false;
                open_container(s, false);
                break;
            case J_OBJ_FIRST:
            case J_OBJ_KEY:
                if (c == '}' && s->st == J_OBJ_FIRST) { close_container(s); break; }
                if (c != '"') return false;
                s->st = J_STRING; s->key = 1; s->sub = 0;
                break;
            case J_COLON:
                if (c != ':') return false;
                s->st = J_VALUE;
                break;
            case J_ARR_FIRST:
                if (c == ']') { close_container(s); break; }
                /* fall through */
            case J_VALUE:
                if (!value_start(s, c)) return false;
                break;
            case J_AFTER:
                if (c == ',') { s->st = in_array(s) ? J_VALUE : J_OBJ_KEY; break; }
                if (c == (in_array(s) ? ']' : '}')) { close_container(s); break; }
                return false;
            case J_STRING:
                if (!string_byte(s, c)) return false;
                break;
            case J_NUMBER:
                if (!number_byte(s, c, &again)) return false;
                break;
            case J_LITERAL: {
                const char *w = LITERALS[s->lit];
                if (c != (unsigned char)w[s->sub]) return false;
                if (!w[++s->sub]) value_ended(s);
                break;
            }
            default:   /* J_DONE */
                return false;
            }
        } while (again);
    }
    return true;
}

bool serve_json_valid(const char *s, size_t n) {
    serve_json st;
    serve_json_init(&st);
    while (n > 0 && is_ws((unsigned char)s[n - 1])) n--;   /* after the object: whitespace only */
    return serve_json_feed(&st, s, n) && serve_json_done(&st);
}

int serve_json_mask(const serve_json *s, const serve_json_vocab *v, unsigned char *allowed) {
    int k = 0;
    for (int t = 0; t < v->n; t++) {
        allowed[t] = 0;
        if (v->len[t] == 0 || (v->banned && v->banned[t])) continue;
        serve_json c = *s;
        if (serve_json_feed(&c, v->bytes[t], v->len[t])) { allowed[t] = 1; k++; }
    }
    return k;
}
