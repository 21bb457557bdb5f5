#include "loader/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace rayaccel {
namespace {

// An ELF file mapped read-only (only the pages read are touched: a plugin with debug info is
// megabytes, of which a few kilobytes matter here), every offset checked against its size
// before it is read.
class Elf {
 public:
  static absl::StatusOr<std::unique_ptr<Elf>> Read(const std::string& path) {
    std::unique_ptr<Elf> elf(new Elf());
    elf->path_ = path;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
      close(fd);
      return elf->Bad("not a regular file");
    }
    elf->size_ = static_cast<size_t>(st.st_size);
    void* at = mmap(nullptr, elf->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (at == MAP_FAILED) return absl::NotFoundError(absl::StrCat(path, ": cannot be mapped"));
    elf->data_ = static_cast<const char*>(at);
    if (elf->size_ < sizeof(Elf64_Ehdr) || std::memcmp(elf->data_, ELFMAG, SELFMAG) != 0) {
      return elf->Bad("not an ELF file");
    }
    Elf64_Ehdr eh = elf->At<Elf64_Ehdr>(0);
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
      return elf->Bad("not a 64-bit little-endian ELF file");
    }
    if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !elf->InFile(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
      return elf->Bad("malformed section table");
    }
    elf->sections_.resize(eh.e_shnum);
    std::memcpy(elf->sections_.data(), elf->data_ + eh.e_shoff,
                elf->sections_.size() * sizeof(Elf64_Shdr));
    return elf;
  }
  ~Elf() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }
  Elf(const Elf&) = delete;
  Elf& operator=(const Elf&) = delete;

  absl::Status Bad(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", why));
  }
  bool InFile(uint64_t offset, uint64_t size) const {
    return offset <= size_ && size <= size_ - offset;
  }
  // Calls `entry(item, strtab)` for each T in every section of `type` (with the string table
  // that section links), every section checked first; `entry` answers whether to go on in
  // that section, or an error.
  template <typename T, typename Entry>
  absl::Status ForEach(uint32_t type, const char* what, Entry entry) const {
    for (const Elf64_Shdr& sh : sections_) {
      if (sh.sh_type != type) continue;
      if (sh.sh_entsize != sizeof(T) || sh.sh_link >= sections_.size() ||
          !InFile(sh.sh_offset, sh.sh_size)) {
        return Bad(absl::StrCat("malformed ", what));
      }
      for (uint64_t off = 0; off + sizeof(T) <= sh.sh_size; off += sizeof(T)) {
        absl::StatusOr<bool> more = entry(At<T>(sh.sh_offset + off), sections_[sh.sh_link]);
        if (!more.ok()) return more.status();
        if (!*more) break;
      }
    }
    return absl::OkStatus();
  }
  template <typename T>
  T At(uint64_t offset) const {
    T t;
    std::memcpy(&t, data_ + offset, sizeof(t));
    return t;
  }
  // A NUL-terminated string at `offset` of the string table `strtab` (checked).
  absl::StatusOr<std::string> String(const Elf64_Shdr& strtab, uint64_t offset) const {
    if (!InFile(strtab.sh_offset, strtab.sh_size) || offset >= strtab.sh_size) {
      return Bad("string outside its table");
    }
    const char* s = data_ + strtab.sh_offset + offset;
    return std::string(s, strnlen(s, strtab.sh_size - offset));
  }

 private:
  Elf() = default;
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::vector<Elf64_Shdr> sections_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ExportedSymbols(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Elf>> elf = Elf::Read(path);
  if (!elf.ok()) return elf.status();
  std::vector<std::string> out;
  absl::Status st = (*elf)->ForEach<Elf64_Sym>(
      SHT_DYNSYM, ".dynsym",
      [&](const Elf64_Sym& sym, const Elf64_Shdr& strtab) -> absl::StatusOr<bool> {
        unsigned bind = ELF64_ST_BIND(sym.st_info);
        unsigned vis = ELF64_ST_VISIBILITY(sym.st_other);
        if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) return true;
        if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) return true;
        if (vis != STV_DEFAULT && vis != STV_PROTECTED) return true;
        absl::StatusOr<std::string> name = (*elf)->String(strtab, sym.st_name);
        if (!name.ok()) return (*elf)->Bad("symbol name outside .dynstr");
        out.push_back(*std::move(name));
        return true;
      });
  if (!st.ok()) return st;
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> LibrarySearchPath(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Elf>> elf = Elf::Read(path);
  if (!elf.ok()) return elf.status();
  size_t slash = path.rfind('/');
  const std::string origin = path.substr(0, slash == std::string::npos ? 0 : slash);
  std::vector<std::string> out;
  absl::Status st = (*elf)->ForEach<Elf64_Dyn>(
      SHT_DYNAMIC, ".dynamic",
      [&](const Elf64_Dyn& dyn, const Elf64_Shdr& strtab) -> absl::StatusOr<bool> {
        if (dyn.d_tag == DT_NULL) return false;  // the end of the table
        if (dyn.d_tag != DT_RUNPATH && dyn.d_tag != DT_RPATH) return true;
        absl::StatusOr<std::string> list = (*elf)->String(strtab, dyn.d_un.d_val);
        if (!list.ok()) return (*elf)->Bad("RUNPATH outside .dynstr");
        for (absl::string_view dir : absl::StrSplit(*list, ':', absl::SkipEmpty())) {
          out.push_back(absl::StrReplaceAll(dir, {{"${ORIGIN}", origin}, {"$ORIGIN", origin}}));
        }
        return true;
      });
  if (!st.ok()) return st;
  return out;
}

}  // namespace rayaccel
