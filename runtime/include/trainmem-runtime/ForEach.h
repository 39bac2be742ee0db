/*===- ForEach.h - macros over the lists of Optimizers.def ----------------===*
 *
 * TMRT_EXPAND((a, b)) is `a, b`; TMRT_FOR_EACH(F, a, b, c) is
 * `F(a) F(b) F(c)` (1 to 8 elements): what the users of Optimizers.def
 * make of an entry's parameter names.
 *
 *===----------------------------------------------------------------------===*/

#ifndef TRAINMEM_RUNTIME_FOREACH_H
#define TRAINMEM_RUNTIME_FOREACH_H

#define TMRT_EXPAND(...) __VA_ARGS__
#define TMRT_UNPAREN(list) TMRT_EXPAND list

#define TMRT_FOR_EACH_1(F, a) F(a)
#define TMRT_FOR_EACH_2(F, a, ...) F(a) TMRT_FOR_EACH_1(F, __VA_ARGS__)
#define TMRT_FOR_EACH_3(F, a, ...) F(a) TMRT_FOR_EACH_2(F, __VA_ARGS__)
#define TMRT_FOR_EACH_4(F, a, ...) F(a) TMRT_FOR_EACH_3(F, __VA_ARGS__)
#define TMRT_FOR_EACH_5(F, a, ...) F(a) TMRT_FOR_EACH_4(F, __VA_ARGS__)
#define TMRT_FOR_EACH_6(F, a, ...) F(a) TMRT_FOR_EACH_5(F, __VA_ARGS__)
#define TMRT_FOR_EACH_7(F, a, ...) F(a) TMRT_FOR_EACH_6(F, __VA_ARGS__)
#define TMRT_FOR_EACH_8(F, a, ...) F(a) TMRT_FOR_EACH_7(F, __VA_ARGS__)
#define TMRT_FOR_EACH_PICK(_1, _2, _3, _4, _5, _6, _7, _8, NAME, ...) NAME
#define TMRT_FOR_EACH(F, ...)                                                  \
  TMRT_FOR_EACH_PICK(__VA_ARGS__, TMRT_FOR_EACH_8, TMRT_FOR_EACH_7,            \
                     TMRT_FOR_EACH_6, TMRT_FOR_EACH_5, TMRT_FOR_EACH_4,        \
                     TMRT_FOR_EACH_3, TMRT_FOR_EACH_2, TMRT_FOR_EACH_1)        \
  (F, __VA_ARGS__)

#endif /* TRAINMEM_RUNTIME_FOREACH_H */
