/* Send a handler's error with the gRPC status it stands for, and nothing else.
 *
 * pyarrow's Flight server turns an exception raised by a Python handler into an Arrow status
 * with arrow::py::ConvertPyError. That status carries the formatted Python traceback as its
 * detail, which Arrow appends to the gRPC message ("... Detail: Python exception: Traceback
 * ..."). Only pyarrow's own FlightError classes escape it, and they can only say INTERNAL,
 * UNAVAILABLE, UNAUTHENTICATED, PERMISSION_DENIED, CANCELLED, DEADLINE_EXCEEDED or UNKNOWN:
 * NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS and UNIMPLEMENTED come only from an Arrow status
 * code (KeyError, Invalid, AlreadyExists, NotImplemented) without a Python detail.
 *
 * `install` points the calls to ConvertPyError made by pyarrow's Flight libraries (their
 * dynamic-linking slots for it) at `convert`. `convert` looks at the pending Python exception:
 * an instance of the registered class has its status built from the exception's
 * `_arrow_status` tuple (Arrow code, Flight code or -1, message, extra_info); anything else
 * goes to the original ConvertPyError unchanged. No Arrow header or library is needed at build
 * time: the functions that build statuses are looked up by name in the libraries pyarrow
 * loaded, and install refuses (returns False, patching nothing) when a lookup fails, so a
 * pyarrow built differently keeps its own behaviour.
 *
 * arrow::Status is one pointer with a non-trivial destructor, so the Itanium C++ ABI returns
 * it through a slot the caller provides, as it returns `Status` below. Every Status here is
 * returned as it is built (C++17 guaranteed elision): none is copied or destroyed in this file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace {

typedef void (*StatusCtorFn)(void *self, char code, const std::string &message);
StatusCtorFn status_ctor = nullptr;

// arrow::Status as the ABI sees it.
struct Status {
    void *state;
    Status(char code, const std::string &message) { status_ctor(this, code, message); }
    Status(const Status &) = delete;
    Status &operator=(const Status &) = delete;
    ~Status() {}  // never runs (see above); its presence makes the ABI return by slot
};

// arrow::StatusCode and arrow::flight::FlightStatusCode are 8-bit enums.
typedef Status (*ConvertFn)(char code);
typedef Status (*FlightErrorFn)(int8_t code, std::string message, std::string extra_info);

const char kConvert[] = "_ZN5arrow2py14ConvertPyErrorENS_10StatusCodeE";
const char kStatusCtor[] =
    "_ZN5arrow6StatusC1ENS_10StatusCodeERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEE";
const char kFlightError[] =
    "_ZN5arrow6flight15MakeFlightErrorENS0_16FlightStatusCodeENSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEES7_";

ConvertFn original_convert = nullptr;
FlightErrorFn flight_error = nullptr;
PyObject *error_class = nullptr;  // strong reference, kept for the process's life

// Called by pyarrow with the GIL held and a Python exception pending.
Status convert(char code) {
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != nullptr && error_class != nullptr &&
        PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject *>(error_class))) {
        PyObject *spec = PyObject_GetAttrString(value, "_arrow_status");
        int arrow_code = 0, flight_code = -1;
        const char *text = nullptr, *extra = nullptr;
        Py_ssize_t text_len = 0, extra_len = 0;
        if (spec != nullptr && PyTuple_Check(spec) &&
            PyArg_ParseTuple(spec, "iis#y#", &arrow_code, &flight_code, &text, &text_len,
                             &extra, &extra_len)) {
            std::string message(text, text_len), info(extra, extra_len);
            Py_DECREF(spec);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            if (flight_code >= 0) {
                return flight_error(static_cast<int8_t>(flight_code), std::move(message),
                                    std::move(info));
            }
            return Status(static_cast<char>(arrow_code), message);
        }
        Py_XDECREF(spec);
        PyErr_Clear();  // a malformed spec: pyarrow's own conversion of the exception
    }
    PyErr_Restore(type, value, tb);
    return original_convert(code);
}

void *lookup(const char *library, const char *symbol) {
    void *handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return nullptr;
    void *found = dlsym(handle, symbol);
    dlclose(handle);  // NOLOAD took a reference: the library stays loaded by pyarrow
    return found;
}

struct Patch {
    PyObject *paths;  // list of real paths of the objects whose slots to point at convert
    int patched;
    int failed;
};

bool listed(const char *name, PyObject *paths) {
    char real[PATH_MAX];
    if (name == nullptr || name[0] == '\0' || realpath(name, real) == nullptr) return false;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(paths); i++) {
        const char *path = PyUnicode_AsUTF8(PyList_GET_ITEM(paths, i));
        if (path != nullptr && std::strcmp(path, real) == 0) return true;
    }
    PyErr_Clear();
    return false;
}

// Points one slot at convert, making its page writable for the store when it is read-only
// (full RELRO) and read-only again after.
bool write_slot(void **slot, bool relro) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
    if (relro && mprotect(reinterpret_cast<void *>(start), page, PROT_READ | PROT_WRITE) != 0) {
        return false;
    }
    __atomic_store_n(slot, reinterpret_cast<void *>(&convert), __ATOMIC_SEQ_CST);
    if (relro) mprotect(reinterpret_cast<void *>(start), page, PROT_READ);
    return true;
}

int patch_object(struct dl_phdr_info *info, size_t, void *data) {
    Patch *patch = static_cast<Patch *>(data);
    if (!listed(info->dlpi_name, patch->paths)) return 0;
    const ElfW(Dyn) *dynamic = nullptr;
    uintptr_t relro_start = 0, relro_end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type == PT_DYNAMIC) {
            dynamic = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + ph.p_vaddr);
        } else if (ph.p_type == PT_GNU_RELRO) {
            relro_start = info->dlpi_addr + ph.p_vaddr;
            relro_end = relro_start + ph.p_memsz;
        }
    }
    if (dynamic == nullptr) {
        patch->failed++;
        return 0;
    }
    uintptr_t symtab = 0, strtab = 0, jmprel = 0, rela = 0;
    size_t jmprel_size = 0, rela_size = 0;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dynamic; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
            case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
            case DT_STRTAB: strtab = d->d_un.d_ptr; break;
            case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
            case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
            case DT_RELA: rela = d->d_un.d_ptr; break;
            case DT_RELASZ: rela_size = d->d_un.d_val; break;
            case DT_PLTREL: pltrel = d->d_un.d_val; break;
        }
    }
    // glibc relocates these addresses in place on most targets, not on all
    auto absolute = [info](uintptr_t address) {
        return address != 0 && address < info->dlpi_addr ? address + info->dlpi_addr : address;
    };
    symtab = absolute(symtab);
    strtab = absolute(strtab);
    jmprel = absolute(jmprel);
    rela = absolute(rela);
    if (symtab == 0 || strtab == 0 || pltrel != DT_RELA) {
        patch->failed++;
        return 0;
    }
    const ElfW(Sym) *symbols = reinterpret_cast<const ElfW(Sym) *>(symtab);
    const char *strings = reinterpret_cast<const char *>(strtab);
    const uintptr_t tables[2][2] = {{jmprel, jmprel_size}, {rela, rela_size}};
    for (const auto &table : tables) {
        const ElfW(Rela) *entries = reinterpret_cast<const ElfW(Rela) *>(table[0]);
        size_t count = table[0] == 0 ? 0 : table[1] / sizeof(ElfW(Rela));
        for (size_t i = 0; i < count; i++) {
            size_t index = ELF64_R_SYM(entries[i].r_info);
            if (index == 0 || std::strcmp(strings + symbols[index].st_name, kConvert) != 0) {
                continue;
            }
            uintptr_t slot = info->dlpi_addr + entries[i].r_offset;
            bool relro = slot >= relro_start && slot < relro_end;
            if (write_slot(reinterpret_cast<void **>(slot), relro)) {
                patch->patched++;
            } else {
                patch->failed++;
            }
        }
    }
    return 0;
}

PyObject *install(PyObject *, PyObject *args) {
    PyObject *paths = nullptr, *cls = nullptr;
    const char *python_lib = nullptr, *arrow_lib = nullptr, *flight_lib = nullptr;
    if (!PyArg_ParseTuple(args, "O!sssO!", &PyList_Type, &paths, &python_lib, &arrow_lib,
                          &flight_lib, &PyType_Type, &cls)) {
        return nullptr;
    }
    if (sizeof(void *) != 8) Py_RETURN_FALSE;  // ELF64 relocations only
    void *convert_fn = lookup(python_lib, kConvert);
    void *ctor_fn = lookup(arrow_lib, kStatusCtor);
    void *flight_fn = lookup(flight_lib, kFlightError);
    if (convert_fn == nullptr || ctor_fn == nullptr || flight_fn == nullptr) Py_RETURN_FALSE;
    original_convert = reinterpret_cast<ConvertFn>(convert_fn);
    status_ctor = reinterpret_cast<StatusCtorFn>(ctor_fn);
    flight_error = reinterpret_cast<FlightErrorFn>(flight_fn);
    Py_INCREF(cls);
    Py_XSETREF(error_class, cls);
    Patch patch = {paths, 0, 0};
    dl_iterate_phdr(patch_object, &patch);
    if (PyErr_Occurred()) return nullptr;
    return PyBool_FromLong(patch.patched > 0 && patch.failed == 0);
}

PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(paths, libarrow_python, libarrow, libarrow_flight, cls) -> bool: route pyarrow's "
     "conversion of handler exceptions of class `cls` (see the module's source) to statuses "
     "built from their `_arrow_status`; False when pyarrow's libraries do not allow it."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_grpcstatus",
    "Flight handler errors sent with their own gRPC status (see flight_server.grpc_status).",
    -1, methods,
};

}  // namespace

PyMODINIT_FUNC PyInit__grpcstatus(void) { return PyModule_Create(&module); }
