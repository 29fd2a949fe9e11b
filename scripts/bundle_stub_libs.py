#!/usr/bin/env python3
"""Which shared libraries a GPU bundle carries, and stand-ins for the rest (issue 45 item 1).

    scripts/bundle_stub_libs.py STAGE_LIB_DIR EXE... < "NAME PATH" lines (ldd's resolved libraries)

Debian's FFmpeg libraries name ~100 libraries (encoders, filters, network protocols, hwaccels):
libx264, libx265, libaom, libvpx, librsvg, libcodec2, ... Ours opens only the allow-listed demuxers
(mov, matroska, gif) and decoders (FFmpeg's own h264, hevc, vp8, vp9, gif, and libdav1d), which call
none of them. The dynamic loader still needs every DT_NEEDED library present and, with the
BIND_NOW flag Debian builds with, every imported symbol defined at load time. So:
  carried: the executables' own needed libraries and all they need, and through the FFmpeg libraries
    (libav*, libsw*) only other FFmpeg libraries and KEEP below;
  stand-in (a few KiB each) for every other library: the same SONAME and symbol versions, defining
    exactly the symbols the carried libraries import from it: functions that return 0 (a null pointer),
    data as zero bytes of the real object's size. FFmpeg itself calls a few at start and while probing
    (av_codec_iterate runs every codec's init_static_data: libaom's asks aom_codec_version and the
    encoder's caps, libvpx's vpx_codec_get_caps; probing runs libgme's and libopenmpt's read_probe):
    0 answers "no capability / not mine" there. No allowed codec opens the others (a wrapper that did
    would get a null context and fail, an error rather than a crash). VLM_BUNDLE_STUB_TRACE=1 logs each
    call.
Writes the carried libraries (copies) and the stand-ins into STAGE_LIB_DIR; prints what it did.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = re.compile(r"^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|"
                  r"libcuda|libcudart|libcublas|libnvJitLink)")
FFMPEG = re.compile(r"^lib(av(codec|format|util|device|filter)|sw(scale|resample)|postproc)\.so")
# What the allowed demuxers/decoders load through FFmpeg: libdav1d (AV1), zlib/bzip2/lzma (Matroska's
# compressed tracks, mov's compressed headers).
KEEP = re.compile(r"^(libdav1d|libz\.so|libbz2|liblzma)")
# Functions that probing a file calls (av_probe_input_format runs every demuxer's read_probe, the
# library-backed ones too): the stand-ins answer "not mine" instead of aborting.
PROBES = {
    "gme_identify_header": 'const char* {c}(const void* h) {{ (void)h; return ""; }}',  # libgme: "" = unknown
    "openmpt_probe_file_header": "int {c}(void) {{ return 0; }}",  # OPENMPT_PROBE_FILE_HEADER_RESULT_FAILURE
    "openmpt_probe_file_header_without_filesize": "int {c}(void) {{ return 0; }}",
}


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def dynsyms(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, "--with-symbol-versions", "-S", path], capture_output=True, text=True,
                         check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if undefined:
            if len(parts) < 2:
                continue
            name = parts[-1]
            syms.append((name.split("@")[0], name.split("@")[-1] if "@" in name else None, None, parts[-2]))
        else:
            if len(parts) < 3:
                continue
            size = int(parts[1], 16) if len(parts) == 4 else 0
            typ, name = parts[-2], parts[-1]
            ver = re.split("@+", name)[1] if "@" in name else None
            syms.append((re.split("@+", name)[0], ver, size, typ))
    return syms


def main():
    lib_dir, exes = sys.argv[1], sys.argv[2:]
    paths = {}
    for line in sys.stdin:
        if line.strip():
            n, p = line.split()
            paths[n] = p
    carried, todo = set(), [(e, False) for e in exes]
    while todo:
        path, via_ffmpeg = todo.pop()
        for n in needed(path):
            if SKIP.match(n) or n in carried or n not in paths:
                continue
            if via_ffmpeg and not (FFMPEG.match(n) or KEEP.match(n)):
                continue
            carried.add(n)
            todo.append((paths[n], bool(FFMPEG.match(n))))
    stubs = sorted(n for n in paths if n not in carried and not SKIP.match(n))
    for n in sorted(carried):
        shutil.copy(paths[n], os.path.join(lib_dir, n))
    imports = {}
    for f in list(exes) + [paths[n] for n in carried]:
        for name, ver, _, _ in dynsyms(f, True):
            imports.setdefault(name, set()).add(ver)
    tmp = tempfile.mkdtemp()
    made = 0
    for n in stubs:
        defined = {s[0]: s for s in dynsyms(paths[n], False) if s[0] in imports and s[3] not in "Uw"}
        if not defined and not any(n in needed(paths[c]) for c in carried):
            continue  # needed only by other stand-ins: not needed at all
        c_lines = ["#include <stdio.h>", "#include <stdlib.h>",
                   f'static void stub_note(const char* s) {{ if (getenv("VLM_BUNDLE_STUB_TRACE")) '
                   f'fprintf(stderr, "vlm bundle: {n} is a stand-in; %s returned 0\\n", s); }}']
        versions = {}
        for name, (_, ver, size, typ) in sorted(defined.items()):
            cname = f"vlm_stub_{len(versions.setdefault(ver, []))}_{abs(hash((name, ver))) % 10**9}"
            if name in PROBES:
                c_lines.append(PROBES[name].format(c=cname))
            elif typ in "TtWi":
                c_lines.append(f'long {cname}(void) {{ stub_note("{name}"); return 0; }}')
            else:
                c_lines.append(f"char {cname}[{max(size or 0, 1)}] __attribute__((aligned(64))) = {{0}};")
            c_lines.append(f'__asm__(".symver {cname},{name}@{"@" if ver else ""}{ver or ""}");' if ver else
                           f'__asm__(".globl {name}\\n.set {name},{cname}");')
            versions[ver].append(name)
        c = os.path.join(tmp, n + ".c")
        open(c, "w").write("\n".join(c_lines) + "\n")
        cmd = ["gcc", "-shared", "-fPIC", "-O1", "-o", os.path.join(lib_dir, n), c, f"-Wl,-soname,{n}"]
        vnames = sorted(v for v in versions if v)
        if vnames:
            vs = os.path.join(tmp, n + ".map")
            open(vs, "w").write("".join(f"{v} {{ }};\n" for v in vnames))
            cmd.append(f"-Wl,--version-script={vs}")
        subprocess.run(cmd, check=True)
        made += 1
    shutil.rmtree(tmp)
    print(f"bundle libs: {len(carried)} carried, {made} stand-ins for libraries the allowed codecs never call "
          f"({', '.join(n.split('.so')[0] for n in stubs[:12])}{', ...' if len(stubs) > 12 else ''})")


if __name__ == "__main__":
    main()
