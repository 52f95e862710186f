//! `Shared<T>`: read-only elements several owners hold at once (a constant tensor's data, in
//! the graph that declared it and in every partition and kernel spec that reads it), so that
//! handing them on is a reference count, not a copy. Ground floor: imports nothing of the crate.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Read-only elements behind a shared owner: a `Vec` of its own (`From<Vec<T>>`), or any
/// `AsRef<[T]>` value, such as the graph's constant holding them (`Shared::from_owner`).
pub struct Shared<T: 'static>(Arc<dyn AsRef<[T]> + Send + Sync>);

impl<T: Send + Sync + 'static> Shared<T> {
    /// The elements `owner` holds, shared with it (no copy).
    pub fn from_owner(owner: impl AsRef<[T]> + Send + Sync + 'static) -> Shared<T> {
        Shared(Arc::new(owner))
    }
}

impl<T: 'static> Deref for Shared<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        (*self.0).as_ref()
    }
}

impl<T: 'static> Clone for Shared<T> {
    fn clone(&self) -> Shared<T> {
        Shared(Arc::clone(&self.0))
    }
}

impl<T: Send + Sync + 'static> From<Vec<T>> for Shared<T> {
    fn from(v: Vec<T>) -> Shared<T> {
        Shared(Arc::new(v))
    }
}

impl<T: Send + Sync + 'static> FromIterator<T> for Shared<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Shared<T> {
        Shared::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Send + Sync + 'static> Default for Shared<T> {
    fn default() -> Shared<T> {
        Shared::from(Vec::new())
    }
}

impl<T: PartialEq + 'static> PartialEq for Shared<T> {
    fn eq(&self, other: &Shared<T>) -> bool {
        **self == **other
    }
}

impl<T: fmt::Debug + 'static> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of another owner's elements reads them without a copy; clones share them.
    #[test]
    fn shares_without_copying() {
        let owner = Arc::new(vec![1i8, -2, 3]);
        let s = Shared::from_owner(ArcVec(Arc::clone(&owner)));
        let t = s.clone();
        assert_eq!(&*t, &[1, -2, 3]);
        assert_eq!(t.as_ptr(), owner.as_ptr());
        assert_eq!(s, Shared::from(vec![1, -2, 3]));
        assert!(Shared::<i8>::default().is_empty());
    }

    struct ArcVec(Arc<Vec<i8>>);
    impl AsRef<[i8]> for ArcVec {
        fn as_ref(&self) -> &[i8] {
            &self.0
        }
    }
}
