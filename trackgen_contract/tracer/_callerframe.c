/* The caller of a watched function, found without a frame object for the watched one.
 *
 * The public API reaches a frame's caller only through the frame's own frame object:
 * PyEval_GetFrame() makes one for the watched function at each of its calls (a GC
 * object the size of its locals and stack), and CPython frees it again at its return:
 * in a loop of clean calls, ~40% of the compiled filter's work. The caller's frame
 * object, the one the filter reads, is made once and lives as long as the calling frame.
 *
 * So where this build knows the interpreter's frame layout (3.12-3.15, whose own
 * headers describe it; CPython's documentation names debuggers and profilers as their
 * users), the interpreter's frame chain is read instead, with the interpreter's own
 * inline functions: the first complete frame (the watched function's, as
 * PyEval_GetFrame finds it), then the first complete one before it (as PyFrame_GetBack
 * does), whose frame object is used where it has one already. Everything else, a caller
 * without a frame object yet or a Python whose layout this file does not know, takes the
 * public route. The interpreter's headers stay in this file alone: they define what
 * only CPython itself should see.
 *
 * (The chain could tell a call the caller's instruction made itself from one made by C
 * code, which 3.13+ rest on the same instruction. The filter does not use that: the
 * Python callback and the full path cannot see it, and a verdict must not depend on
 * which filter runs.)
 */
#include "_callerframe.h"

#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x03100000 && defined(__has_include)
#  if PY_VERSION_HEX >= 0x030E0000 && __has_include("internal/pycore_interpframe.h")
#    define FRAME_CHAIN "internal/pycore_interpframe.h"
#  elif PY_VERSION_HEX < 0x030E0000 && __has_include("internal/pycore_frame.h")
#    define FRAME_CHAIN "internal/pycore_frame.h"
#  endif
#endif

#ifdef FRAME_CHAIN
#  define Py_BUILD_CORE 1
#  include FRAME_CHAIN
#  undef Py_BUILD_CORE

#  if PY_VERSION_HEX < 0x030D0000
#    define FRAME_CODE(frame) ((frame)->f_code)
#  else
#    define FRAME_CODE(frame) _PyFrame_GetCode(frame)
#  endif

/* The caller's frame object where the chain has one already (borrowed), else NULL. */
static PyFrameObject *
made_caller_frame(PyObject *code)
{
    _PyInterpreterFrame *callee = _PyThreadState_GetFrame(PyThreadState_Get());
    if (callee == NULL || (PyObject *)FRAME_CODE(callee) != code) {
        return NULL;
    }
    _PyInterpreterFrame *caller = _PyFrame_GetFirstComplete(callee->previous);
    return caller == NULL ? NULL : caller->frame_obj;
}

const int reads_frame_chain = 1;
#else
const int reads_frame_chain = 0;
#endif

PyFrameObject *
caller_frame(PyObject *code)
{
#ifdef FRAME_CHAIN
    PyFrameObject *made = made_caller_frame(code);
    if (made != NULL) {
        return (PyFrameObject *)Py_NewRef(made);
    }
#endif
    PyFrameObject *callee = PyEval_GetFrame();  /* borrowed */
    if (callee == NULL) {
        return NULL;
    }
    PyCodeObject *callee_code = PyFrame_GetCode(callee);
    PyFrameObject *caller = (PyObject *)callee_code == code ? PyFrame_GetBack(callee) : NULL;
    Py_DECREF(callee_code);
    return caller;
}
